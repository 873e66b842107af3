"""Inference and probes on /v2 answered by uvicorn's protocol itself, past uvicorn's ASGI request cycle.

uvicorn builds a cycle for every request: an asyncio.Event, receive and send coroutines and their message dicts,
each response header checked against two regular expressions as the head is written. Measured on the 2-core
bench machine at 64 connections, that costs the event loop about 15 µs a request: a bare ASGI echo spends 21-23 µs
of the loop a request, the same canned answer written by the protocol 6-7 µs (7 with a task per request,
bench/echo_protocol.py). Infera's hot requests are small and answered in one piece, so DirectRequestsProtocol reads
such a body whole, asks its responder for the answer (`respond_direct`, which calls `V2App.respond`, the code the
ASGI path runs) in one task, and writes head and body in one write. Anything else takes uvicorn's cycle: other paths
and methods, HTTP/1.0, a query string or an escaped path, `Expect: 100-continue`, a body of unknown length or over
DIRECT_BODY_BYTES (read as the app asks, under uvicorn's flow control), an upgrade, a request pipelined behind one
still answered, a draining process.

The console's protocol (console/hosting/uvicorn_limits.py) is a subclass, its responder the composed application; the
standalone engine's is `engine.frontend.standalone:DirectProtocol`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.utils import get_client_addr

from engine.frontend.handlers import Reply
from engine.frontend.routes import Route

log = logging.getLogger("infera.frontend")

# bodies up to this size are read whole before the answer begins, larger ones take uvicorn's cycle: what uvicorn's
# own cycle buffers before it pauses reading (64 KiB), so a client that is refused (no token, say) after its body
# has arrived held no more of the server's memory than it could before
DIRECT_BODY_BYTES = HIGH_WATER_LIMIT


class DirectResponder(Protocol):
    """Who answers the requests the protocol reads whole itself."""

    def direct_route(self, path: str, method: str) -> Route | None:
        """The route when the request may be answered directly (V2App.direct_route), else None."""

    async def respond_direct(self, scope: dict[str, Any], body: bytes, route: Route) -> Reply:
        """The answer, never a stream (V2App.respond)."""


class _NoEvent:
    """What uvicorn's protocol sets on a cycle's message_event (a lost connection, a read deadline): nothing
    waits on a direct request's body, which is whole before its answer begins."""

    __slots__ = ()

    def set(self) -> None:
        pass


class DirectCycle:
    """A request the protocol answers itself: the attributes of uvicorn's cycle that the protocol's bookkeeping
    reads (pipelining, shutdown, a lost connection, read deadlines), and the body as it arrives."""

    __slots__ = ("scope", "route", "chunks", "keep_alive", "disconnected", "response_complete", "answering", "task")
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
        self.task: asyncio.Task | None = None  # the task making it

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


class DirectRequestsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol answering the requests its `responder` routes directly (None: none of them)."""

    responder: DirectResponder | None = None

    def draining(self) -> bool:
        """Whether the server is draining: requests then take uvicorn's cycle, answers close their connection."""
        return False

    def on_headers_complete(self) -> None:
        if not self._direct_cycle():
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is DirectCycle:
            cycle.chunks.append(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if type(cycle) is DirectCycle and not cycle.answering:
            cycle.answering = True
            task = self.loop.create_task(self._answer_direct(cycle, cycle.body()))
            cycle.task = task
            self.tasks.add(task)  # uvicorn's shutdown waits for it, as for its own cycles' tasks
            task.add_done_callback(self.tasks.discard)
        else:
            super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        if type(cycle) is DirectCycle and cycle.task is not None and not cycle.response_complete:
            if cycle.route.endpoint == "infer":  # its caller went away: a request still queued leaves its queue
                cycle.task.cancel()

    def _direct_cycle(self) -> bool:
        """Take the request whose headers just arrived as a DirectCycle when it qualifies."""
        responder = self.responder
        if responder is None:
            return False
        cycle, parser = self.cycle, self.parser
        if cycle is not None and not cycle.response_complete:
            return False  # pipelined behind a request still answered: uvicorn's cycle queues it
        url = self.url
        if (
            self.expect_100_continue
            or b"?" in url
            or b"%" in url
            or self.root_path
            or parser.get_http_version() != "1.1"
            or parser.should_upgrade()
            or self.draining()
        ):
            return False
        path, method = url.decode("latin-1"), parser.get_method().decode("latin-1")
        route = responder.direct_route(path, method)
        if route is None or direct_length(self.headers) is None:
            return False
        scope = self.scope  # uvicorn's, begun with the message: the rest of what ASGI's has
        scope["method"] = method
        scope["path"] = path
        scope["raw_path"] = url
        scope["query_string"] = b""
        self.cycle = DirectCycle(scope, route, keep_alive=parser.should_keep_alive())
        return True

    async def _answer_direct(self, cycle: DirectCycle, body: bytes) -> None:
        try:
            reply = await self.responder.respond_direct(cycle.scope, body, cycle.route)
        except asyncio.CancelledError:  # its client went away, or uvicorn's shutdown cancelled it past its grace
            cycle.response_complete = True
            self.transport.close()
            raise
        except Exception:  # respond answers every error itself; this is a bug in between
            log.exception("unexpected error answering %s %s", cycle.scope["method"], cycle.scope["path"])
            reply = Reply(500, b'{"error":"internal error"}')
            cycle.keep_alive = False
        cycle.response_complete = True
        transport = self.transport
        if cycle.disconnected or transport.is_closing():
            return
        keep_alive = cycle.keep_alive and not self.draining()
        transport.write(response_bytes(reply, self.server_state.default_headers, keep_alive))
        if self.access_log:
            scope = cycle.scope
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d',
                get_client_addr(scope),
                scope["method"],
                scope["path"],
                "1.1",
                reply.status,
            )
        if not keep_alive:
            transport.close()
        self.on_response_complete()  # uvicorn's: the next pipelined request, or the keep-alive timer
