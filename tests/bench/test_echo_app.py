"""The HTTP ceiling app answers a canned response of Infera's size after reading the whole body."""

from __future__ import annotations

import json

from bench.echo_app import load_responses, make_app


async def call(app, path: str, headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> list[dict]:
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
    incoming = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[dict] = []

    async def receive() -> dict:
        return incoming.pop(0)

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert not incoming, "the app must read the whole body"
    return sent


async def test_it_answers_json_and_binary_bodies_with_their_canned_responses(tmp_path):
    (tmp_path / "simple.json.response").write_bytes(b'{"outputs":[]}')
    (tmp_path / "simple.json.headers").write_text(json.dumps({"content-type": "application/json"}))
    (tmp_path / "simple.binary.response").write_bytes(b"{}\x01\x02")
    (tmp_path / "simple.binary.headers").write_text(json.dumps({"inference-header-content-length": "2"}))
    app = make_app(load_responses(tmp_path))

    start, body = await call(app, "/v2/models/simple/infer", [], [b'{"inputs"', b":[]}"])
    assert start["status"] == 200 and body["body"] == b'{"outputs":[]}'
    assert (b"content-length", b"14") in start["headers"]

    binary = [(b"inference-header-content-length", b"2")]
    start, body = await call(app, "/v2/models/simple/infer", binary, [b"{}\x00"])
    assert body["body"] == b"{}\x01\x02" and (b"inference-header-content-length", b"2") in start["headers"]

    start, _ = await call(app, "/v2/models/unknown/infer", [], [b"{}"])
    assert start["status"] == 404
