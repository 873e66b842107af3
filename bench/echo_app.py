"""The HTTP ceiling: a bare ASGI app that reads a v2 request and answers a canned response of Infera's size.

It parses nothing and runs no model, so what it reaches under a server is the most any v2 server in Python can
reach there. Responses come from BENCH_ECHO_DIR: `<model>.<json|binary>.response` and `.headers` (JSON) files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

Responses = dict[tuple[str, str], tuple[bytes, list[tuple[bytes, bytes]]]]


def load_responses(folder: Path) -> Responses:
    """Every canned response in `folder`, keyed by (model, encoding)."""
    responses: Responses = {}
    for path in folder.glob("*.response"):
        model, encoding = path.name.removesuffix(".response").rsplit(".", 1)
        headers = json.loads(path.with_suffix(".headers").read_text())
        body = path.read_bytes()
        pairs = [(k.encode(), v.encode()) for k, v in headers.items()]
        pairs.append((b"content-length", str(len(body)).encode()))
        responses[(model, encoding)] = (body, pairs)
    return responses


def make_app(responses: Responses):
    """An ASGI app answering POST /v2/models/<m>/infer with the canned response and GET health with 200."""
    not_found = (b'{"error":"not found"}', [(b"content-type", b"application/json"), (b"content-length", b"21")])

    async def app(scope: dict[str, Any], receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        binary = False
        for key, _ in scope["headers"]:
            if key == b"inference-header-content-length":
                binary = True
        more = True
        while more:  # read the whole body, as a real server must
            message = await receive()
            more = message.get("more_body", False)
        parts = scope["path"].split("/")
        status = 200
        if scope["method"] == "GET":
            body, headers = b"", [(b"content-length", b"0")]
        elif len(parts) >= 5 and parts[-1] == "infer" and (parts[3], "binary" if binary else "json") in responses:
            body, headers = responses[(parts[3], "binary" if binary else "json")]
        else:
            status, (body, headers) = 404, not_found
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


app = make_app(load_responses(Path(os.environ["BENCH_ECHO_DIR"]))) if "BENCH_ECHO_DIR" in os.environ else None
