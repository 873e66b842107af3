"""uvicorn's HTTP protocol with read deadlines, `Connection: close` while the process drains, one write per
response (coalesced_writes.py), and /v2 inference and probes answered past ASGI
(engine/frontend/direct_http.py).

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) but has no deadline for a request being
received: a client that opens a connection and sends nothing, or half a request line, or a body a byte a minute,
holds it for as long as it likes. This subclass of the engine's uvicorn protocol keeps read_deadlines.py's
deadlines with one ReadClock per connection.
"""

from __future__ import annotations

import logging
from typing import Any

from console.hosting.coalesced_writes import CoalescedWrites
from console.hosting.read_deadlines import ReadClock, timeout_answer
from console.hosting.shutdown import Connections
from engine.api import DirectCycle, DirectRequestsProtocol, DirectResponder, HttpSettings

logger = logging.getLogger("console.http")


def timed_protocol(
    settings: HttpSettings, connections: Connections, direct: DirectResponder | None = None
) -> type[DirectRequestsProtocol]:
    """The protocol class to give uvicorn (`http=`) for these limits and this process's connections; with
    `direct`, /v2 inference and probes are answered past uvicorn's ASGI cycle (engine/frontend/direct_http.py)."""

    class TimedHttpToolsProtocol(DirectRequestsProtocol):
        responder = direct

        def draining(self) -> bool:
            return connections.draining

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
            super().on_headers_complete()
            self._clock.stop()
            cycle = self.cycle
            if cycle is not None and cycle.scope is self.scope:  # this request's: not a WebSocket upgrade
                if type(cycle) is not DirectCycle:  # a direct one writes its answer itself, in one piece
                    cycle.transport = self._writes
                    if connections.draining:
                        cycle.keep_alive = False  # answered with Connection: close
                self._clock.expect_body()

        def on_body(self, body: bytes) -> None:
            super().on_body(body)
            self._clock.got_body(len(body))

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._clock.stop()

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
