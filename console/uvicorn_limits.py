"""uvicorn's HTTP protocol with read deadlines, `Connection: close` while the process drains, one write per
response (console/coalesced_writes.py), and /v2 inference and probes answered past ASGI (console/direct_requests.py).

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) but has no deadline for a request being
received: a client that opens a connection and sends nothing, or half a request line, or a body a byte a minute,
holds it for as long as it likes. This subclass of its httptools protocol keeps console/read_deadlines.py's
deadlines with one ReadClock per connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from console.coalesced_writes import CoalescedWrites
from console.direct_requests import DirectCycle, direct_length, response_bytes
from console.read_deadlines import ReadClock, timeout_answer
from console.shutdown import Connections
from engine.frontend import Reply, Route
from engine.settings import HttpSettings

logger = logging.getLogger("console.http")


class DirectResponder(Protocol):
    """Who answers the requests the protocol reads whole itself (console/composition.py InferaApplication)."""

    def direct_route(self, path: str, method: str) -> Route | None: ...

    async def respond_direct(self, scope: dict[str, Any], body: bytes, route: Route) -> Reply: ...


def timed_protocol(
    settings: HttpSettings, connections: Connections, direct: DirectResponder | None = None
) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (`http=`) for these limits and this process's connections; with
    `direct`, /v2 inference and probes are answered past uvicorn's ASGI cycle (console/direct_requests.py)."""

    class TimedHttpToolsProtocol(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            # reading paused: the application has not taken what arrived, which is not the client's doing
            self._clock = ReadClock(
                settings,
                now=self.loop.time,
                call_later=self.loop.call_later,
                overdue=self._overdue,
                held=lambda: self.flow.read_paused,
            )
            self._clock.expect_headers()  # a first request's clock runs from the connection
            self._clock.watch()
            self._writes = CoalescedWrites(transport, self.loop)  # every request cycle of the connection writes here

        def connection_lost(self, exc: Exception | None) -> None:
            self._clock.stop()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if not self.transport.is_closing():
                self._clock.watch()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if self._clock.expecting is None:
                self._clock.expect_headers()

        def on_headers_complete(self) -> None:
            if direct is not None and self._direct_cycle():
                self._clock.stop()
                self._clock.expect_body()
                return
            super().on_headers_complete()
            self._clock.stop()
            if self.cycle is not None and self.cycle.scope is self.scope:  # not a WebSocket upgrade
                self.cycle.transport = self._writes
                if connections.draining:
                    self.cycle.keep_alive = False  # answered with Connection: close
                self._clock.expect_body()

        def on_body(self, body: bytes) -> None:
            cycle = self.cycle
            if type(cycle) is DirectCycle:
                cycle.chunks.append(body)
            else:
                super().on_body(body)
            self._clock.got_body(len(body))

        def on_message_complete(self) -> None:
            cycle = self.cycle
            if type(cycle) is DirectCycle and not cycle.answering:
                cycle.answering = True
                task = self.loop.create_task(self._answer_direct(cycle, cycle.body()))
                self.tasks.add(task)  # uvicorn's shutdown waits for it, as for its own cycles' tasks
                task.add_done_callback(self.tasks.discard)
            else:
                super().on_message_complete()
            self._clock.stop()

        # ---- requests answered past ASGI (console/direct_requests.py)

        def _direct_cycle(self) -> bool:
            """Take the request whose headers just arrived as a DirectCycle when it qualifies."""
            cycle, parser = self.cycle, self.parser
            if cycle is not None and not cycle.response_complete:
                return False  # pipelined behind a request still answered: uvicorn's cycle queues it
            url = self.url
            if (
                connections.draining
                or self.expect_100_continue
                or b"?" in url
                or b"%" in url
                or self.root_path
                or parser.get_http_version() != "1.1"
                or parser.should_upgrade()
            ):
                return False
            path, method = url.decode("latin-1"), parser.get_method().decode("latin-1")
            route = direct.direct_route(path, method)
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
                reply = await direct.respond_direct(cycle.scope, body, cycle.route)
            except asyncio.CancelledError:  # uvicorn's shutdown cancelled it past its grace
                cycle.response_complete = True
                self.transport.close()
                raise
            except Exception:  # respond answers every error itself; this is a bug in between
                logger.exception("unexpected error answering %s %s", cycle.scope["method"], cycle.scope["path"])
                reply = Reply(500, b'{"error":"internal error"}')
                cycle.keep_alive = False
            cycle.response_complete = True
            transport = self.transport
            if cycle.disconnected or transport.is_closing():
                return
            keep_alive = cycle.keep_alive and not connections.draining
            transport.write(response_bytes(reply, self.server_state.default_headers, keep_alive))
            if self.access_log:
                scope = cycle.scope
                self.access_logger.info(
                    '%s - "%s %s HTTP/%s" %d',
                    _peer(scope["client"]),
                    scope["method"],
                    scope["path"],
                    "1.1",
                    reply.status,
                )
            if not keep_alive:
                transport.close()
            self.on_response_complete()  # uvicorn's: the next pipelined request, or the keep-alive timer

        def _overdue(self, what: str, reason: str) -> None:
            if self.transport.is_closing():
                return
            cycle = self.cycle
            answered = False  # whether this connection has begun an answer it cannot take back
            if what == "body" and cycle is not None:
                answered = cycle.response_started
                if not cycle.response_complete:
                    cycle.disconnected = True  # the application now reads a disconnect; its sends go nowhere
                    cycle.message_event.set()
            elif cycle is not None and not cycle.response_complete:
                # a pipelined request trickles in behind one still being answered: close after that one
                cycle.keep_alive = False
                return
            logger.info("closing the connection of %s: %s", _peer(self.client), reason)
            if not answered:
                self.transport.write(timeout_answer(reason))
            self.transport.close()

    return TimedHttpToolsProtocol


def _peer(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "a client"
