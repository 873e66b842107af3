"""Inference and probes on /v2 answered by uvicorn's protocol itself, past uvicorn's ASGI request cycle.

uvicorn builds a cycle for every request: an asyncio.Event, receive and send coroutines and their message dicts,
each response header checked against two regular expressions as the head is written. Measured on the 2-core
bench machine at 64 connections, that costs the event loop about 15 µs a request: a bare ASGI echo spends 21-23 µs
of the loop a request, the same canned answer written by the protocol 6-7 µs (7 with a task per request). Infera's
hot requests are small and answered in one piece, so the protocol (console/uvicorn_limits.py) reads such a body
whole, asks the V2App for the answer (`V2App.respond`, the same code the ASGI path runs) in one task, and writes
head and body in one write. Anything else takes uvicorn's cycle: other paths and methods, HTTP/1.0, a query string
or an escaped path, `Expect: 100-continue`, a body of unknown length or over DIRECT_BODY_BYTES (read as the app
asks, under uvicorn's flow control), an upgrade, a request pipelined behind one still answered, a draining process.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from engine.frontend import Reply, Route

# bodies up to this size are read whole before the answer begins, larger ones take uvicorn's cycle: what uvicorn's
# own cycle buffers before it pauses reading (64 KiB), so a client that is refused (no token, say) after its body
# has arrived held no more of the server's memory than it could before
DIRECT_BODY_BYTES = HIGH_WATER_LIMIT


class _NoEvent:
    """What uvicorn's protocol sets on a cycle's message_event (a lost connection, a read deadline): nothing
    waits on a direct request's body, which is whole before its answer begins."""

    __slots__ = ()

    def set(self) -> None:
        pass


class DirectCycle:
    """A request the protocol answers itself: the attributes of uvicorn's cycle that the protocol's bookkeeping
    reads (pipelining, shutdown, a lost connection, read deadlines), and the body as it arrives."""

    __slots__ = ("scope", "route", "chunks", "keep_alive", "disconnected", "response_complete", "answering")
    message_event = _NoEvent()
    response_started = False  # the answer is written whole, at once

    def __init__(self, scope: dict[str, Any], route: Route, keep_alive: bool) -> None:
        self.scope = scope
        self.route = route
        self.chunks: list[bytes] = []
        self.keep_alive = keep_alive
        self.disconnected = False
        self.response_complete = False
        self.answering = False  # the body is whole and its answer is being made

    def body(self) -> bytes:
        chunks = self.chunks
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)


def direct_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The declared body length when a request may be answered directly (no body counts as 0), None when it may
    not: a chunked or otherwise encoded transfer, a length that is not a number or over DIRECT_BODY_BYTES."""
    length = 0
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit():
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            return None
    return length if length <= DIRECT_BODY_BYTES else None


def response_bytes(reply: Reply, default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """A Reply as HTTP/1.1 writes it, head and body in one piece, with the server's default headers (uvicorn's
    date and server) first, as uvicorn's cycle writes them."""
    parts = [STATUS_LINE[reply.status]]
    for name, value in default_headers:
        parts += (name, b": ", value, b"\r\n")
    body = reply.body
    parts += (b"content-type: ", reply.content_type, b"\r\ncontent-length: %d\r\n" % len(body))
    for name, value in reply.headers:
        parts += (name, b": ", value, b"\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)
