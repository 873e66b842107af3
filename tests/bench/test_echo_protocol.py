"""The ceiling past ASGI: uvicorn's protocol answers an inference with its canned response itself, and leaves the
rest to the ASGI echo."""

from __future__ import annotations

import asyncio
import json
import socket

import uvicorn

from bench.echo_app import load_responses, make_app
from bench.echo_protocol import echo_protocol


async def test_it_answers_inferences_itself_and_the_rest_through_asgi(tmp_path):
    (tmp_path / "simple.json.response").write_bytes(b'{"outputs":[]}')
    (tmp_path / "simple.json.headers").write_text(json.dumps({"content-type": "application/json"}))
    (tmp_path / "simple.binary.response").write_bytes(b"{}")
    (tmp_path / "simple.binary.headers").write_text(json.dumps({"inference-header-content-length": "2"}))
    responses = load_responses(tmp_path)
    called: list[str] = []
    echo = make_app(responses)

    async def app(scope, receive, send):
        called.append(scope.get("path", ""))
        await echo(scope, receive, send)

    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, http=echo_protocol(responses), lifespan="off", log_level="warning", loop="asyncio")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0)  # uvicorn starts on this same loop
    try:
        reader, writer = await asyncio.open_connection(*listener.getsockname()[:2])
        body = b'{"inputs":[]}'
        infer = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        writer.write(infer + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200 OK") and b"content-length: 14" in head
        assert await asyncio.wait_for(reader.readexactly(14), 30) == b'{"outputs":[]}'
        ready = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert ready.startswith(b"HTTP/1.1 200 OK")
        writer.close()
    finally:
        server.should_exit = True
        await task
    assert called == ["/v2/health/ready"]  # the inference never reached the ASGI app
