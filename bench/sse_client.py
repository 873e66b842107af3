"""A lean client for server-sent events over HTTP/1.1 keep-alive, for bench.generation: it counts a stream's
events (and error events) as the chunks arrive, without decoding their JSON, so that on a shared 2-core machine
the load generator leaves the cores to the server it measures (aiohttp and a JSON parse per token cost the client
about 100 us a token, a third of the server's own cost at 32 streams).

Each event of Infera's generate_stream is one chunk of the chunked body (`data: {...}\\n\\n`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

EVENT = b"data: "
ERROR_EVENT = b'data: {"error"'


@dataclass
class StreamCount:
    """What one answer brought: its status, events, error events, and when the first event came."""

    status: int = 0
    events: int = 0
    errors: int = 0
    first_event_at: float | None = None  # time.perf_counter()


@dataclass
class ResponseReader:
    """An HTTP/1.1 response read incrementally: head, then a chunked or Content-Length body whose events are
    counted. `feed` returns True once the response is complete."""

    count: StreamCount = field(default_factory=StreamCount)
    buffer: bytearray = field(default_factory=bytearray)
    chunked: bool | None = None  # unknown until the head is read
    left: int = -1  # bytes of a Content-Length body still to come

    def feed(self, data: bytes) -> bool:
        self.buffer += data
        if self.chunked is None and not self._head():
            return False
        if not self.chunked:
            taken = min(self.left, len(self.buffer))
            self._events(bytes(self.buffer[:taken]))
            del self.buffer[:taken]
            self.left -= taken
            return self.left == 0
        return self._chunks()

    def _head(self) -> bool:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[: end + 4]
        self.count.status = int(lines[0].split()[1])
        headers = dict(line.lower().split(b": ", 1) for line in lines[1:] if b": " in line)
        self.chunked = headers.get(b"transfer-encoding") == b"chunked"
        self.left = int(headers.get(b"content-length", b"0"))
        return True

    def _chunks(self) -> bool:
        buffer = self.buffer
        while True:
            line_end = buffer.find(b"\r\n")
            if line_end < 0:
                return False
            size = int(bytes(buffer[:line_end]).split(b";")[0], 16)
            if len(buffer) < line_end + 2 + size + 2:
                return False
            if size == 0:
                del buffer[: line_end + 4]
                return True
            self._events(bytes(buffer[line_end + 2 : line_end + 2 + size]))
            del buffer[: line_end + 2 + size + 2]

    def _events(self, data: bytes) -> None:
        events = data.count(EVENT)
        if events and self.count.first_event_at is None:
            self.count.first_event_at = time.perf_counter()
        self.count.events += events
        self.count.errors += data.count(ERROR_EVENT)


class SSEConnection(asyncio.Protocol):
    """One keep-alive connection that posts a request at a time and counts its answer's events."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader: ResponseReader | None = None
        self.done: asyncio.Future[StreamCount] | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> SSEConnection:
        _, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.reader is not None and self.reader.feed(data) and self.done is not None and not self.done.done():
            self.done.set_result(self.reader.count)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"the server closed the connection: {exc}"))

    async def post(self, host: str, path: str, body: bytes) -> StreamCount:
        assert self.transport is not None
        self.reader = ResponseReader()
        self.done = asyncio.get_running_loop().create_future()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Accept: text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        return await self.done

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
