"""Call an ASGI app in process, the way a server would, and collect its answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson


@dataclass
class Answer:
    """Status, headers (lower-case names) and body of one response."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    def json(self) -> Any:
        return orjson.loads(self.body)


async def call(
    app: Any,
    method: str,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    chunks: list[bytes] | None = None,
) -> Answer:
    """Send one HTTP request through `app`; `chunks` streams the body in pieces instead of `body`."""
    pieces = list(chunks) if chunks is not None else [body]
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": raw_headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    sent: list[dict[str, Any]] = []
    answered = asyncio.Event()

    async def receive() -> dict[str, Any]:
        if pieces:
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}
        await answered.wait()  # as a server's: the client stays until its answer is whole
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            answered.set()

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    names = {k.decode(): v.decode() for k, v in start["headers"]}
    return Answer(start["status"], names, body_out)
