"""console/hosting/coalesced_writes.py under the console's uvicorn protocol, on loopback: a response's head and body go
out in one write, a head whose body is still being made goes out at once, and `100 Continue` is never held."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from console.hosting.shutdown import Connections
from console.hosting.uvicorn_limits import timed_protocol
from engine.settings import HttpSettings

REQUEST = b"GET /whole HTTP/1.1\r\nHost: infera\r\n\r\n"


class RecordingTransport:
    """The connection's real transport, noting every write made on it."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self.transport = transport
        self.writes = writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


class Harness:
    """A uvicorn server with the console's protocol on a loopback port, and each connection's writes."""

    def __init__(self) -> None:
        self.writes: list[list[bytes]] = []
        self.release = asyncio.Event()  # lets the streaming endpoint send its body
        base = timed_protocol(HttpSettings(), Connections())
        harness = self

        class Recorded(base):  # type: ignore[misc, valid-type]
            def connection_made(self, transport: Any) -> None:
                harness.writes.append([])
                super().connection_made(RecordingTransport(transport, harness.writes[-1]))

        self.protocol = Recorded

    async def app(self, scope: dict, receive, send) -> None:
        if scope["type"] != "http":
            return
        message = await receive()
        body = message.get("body", b"") or b"whole"
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        if scope["path"] == "/stream":
            await self.release.wait()
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served():
    harness = Harness()
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(
        harness.app, http=harness.protocol, lifespan="off", log_level="warning", loop="asyncio", interface="asgi3"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[listener]))
    while not server.started:
        await asyncio.sleep(0)  # a yield to the loop, not a wait on time: uvicorn starts on this same loop
    try:
        yield harness, listener.getsockname()[1]
    finally:
        server.should_exit = True
        await task


async def _read_until(reader: asyncio.StreamReader, marker: bytes) -> bytes:
    return await asyncio.wait_for(reader.readuntil(marker), timeout=30)


async def test_it_writes_a_whole_response_once(served) -> None:
    harness, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(REQUEST)
    head = await _read_until(reader, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and await reader.readexactly(5) == b"whole"
    writer.close()
    (writes,) = harness.writes
    assert len(writes) == 1 and writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"whole")


async def test_it_sends_a_streams_head_before_its_body_is_made(served) -> None:
    harness, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /stream HTTP/1.1\r\nHost: infera\r\n\r\n")
    head = await _read_until(reader, b"\r\n\r\n")  # arrives while the app still waits to send the body
    assert head.startswith(b"HTTP/1.1 200 OK")
    harness.release.set()
    assert await reader.readexactly(5) == b"whole"
    writer.close()
    assert [w[:15] for w in harness.writes[0]] == [b"HTTP/1.1 200 OK", b"whole"]


async def test_it_never_holds_a_100_continue(served) -> None:
    harness, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /whole HTTP/1.1\r\nHost: infera\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
    assert await _read_until(reader, b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"  # before the body is sent
    writer.write(b"data")
    head = await _read_until(reader, b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and await reader.readexactly(4) == b"data"
    writer.close()
    assert len(harness.writes[0]) == 2  # the interim answer, then the whole response
