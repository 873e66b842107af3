"""A graceful shutdown of the serving process: what is in flight, how it ends, and what a second signal does.

The first SIGTERM (or Ctrl-C) drains the process, the same way under uvicorn (uvicorn_runner.py) and daphne
(daphne_runner.py):

1. the server stops listening; /v2/health/ready answers 503 and gRPC health NOT_SERVING (the engine drains), and
   the gRPC front end takes no new calls;
2. open WebSockets are closed with 1001 "going away" (a dashboard reconnects, to another replica if there is one);
3. HTTP requests and gRPC calls in flight finish; a request that arrives on a connection already open is served
   too, answered with `Connection: close`;
4. once none is left, or INFERA_SHUTDOWN_GRACE_SECONDS after the signal, every connection closes, the models unload
   (a python model still running a batch at the deadline has its stub stopped), and the process exits 0.

A second signal exits at once with 128 + its number, after stopping the python model stubs (no orphan survives).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from types import FrameType
from typing import Any

logger = logging.getLogger("console.shutdown")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
GOING_AWAY = 1001
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Connections:
    """The HTTP requests in flight and the WebSockets open in this process; `drain()` ends the WebSockets."""

    def __init__(self) -> None:
        self.requests = 0
        self.draining = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._sockets: set[_Socket] = set()

    def request_started(self) -> None:
        self.requests += 1
        self._idle.clear()

    def request_ended(self) -> None:
        self.requests -= 1
        if not self.requests:
            self._idle.set()

    async def websocket(self, app: Callable, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """Run a WebSocket's application so that `drain()` can close it."""
        socket = _Socket(receive, send)
        if self.draining:
            await socket.go_away()
            return
        self._sockets.add(socket)
        try:
            await app(scope, socket.receive, socket.send)
        finally:
            self._sockets.discard(socket)

    async def drain(self) -> None:
        """From now on the process is going away: every open WebSocket is closed with 1001."""
        self.draining = True
        await asyncio.gather(*(socket.go_away() for socket in list(self._sockets)))

    async def wait_for_requests(self, timeout: float) -> bool:
        """Wait until no HTTP request is in flight, for at most `timeout` seconds; False if some still are."""
        if not self.requests:
            return True
        try:
            await asyncio.wait_for(self._idle.wait(), max(timeout, 0.0))
        except TimeoutError:
            return False
        return True


class _Socket:
    """One WebSocket's receive and send, with a way to end it from outside: close 1001 and tell the application."""

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._lock = asyncio.Lock()  # the application and go_away() may send at the same time
        self._gone = asyncio.Event()
        self.closed = False

    async def receive(self) -> Message:
        if self._gone.is_set():
            return {"type": "websocket.disconnect", "code": GOING_AWAY}
        receiving = asyncio.ensure_future(self._receive())
        going = asyncio.ensure_future(self._gone.wait())
        await asyncio.wait({receiving, going}, return_when=asyncio.FIRST_COMPLETED)
        going.cancel()
        if receiving.done():
            return receiving.result()
        receiving.cancel()
        return {"type": "websocket.disconnect", "code": GOING_AWAY}

    async def send(self, message: Message) -> None:
        async with self._lock:
            if self.closed:
                return  # closed by go_away(): what the application still sends has nowhere to go
            self.closed = message["type"] == "websocket.close"
            await self._send(message)

    async def go_away(self) -> None:
        async with self._lock:
            if not self.closed:
                self.closed = True
                try:
                    await self._send({"type": "websocket.close", "code": GOING_AWAY, "reason": "server shutting down"})
                except Exception as exc:  # noqa: BLE001 - the client may be gone already; it is closed either way
                    logger.info("closing a WebSocket at shutdown: %s: %s", type(exc).__name__, exc)
        self._gone.set()


class ShutdownSignals:
    """SIGTERM and SIGINT: the first calls `drain` (from the signal handler: it must only schedule work), the
    second calls `abort` and exits the process at once with 128 + the signal's number."""

    def __init__(self, drain: Callable[[], None], abort: Callable[[], None]) -> None:
        self.drain = drain
        self.abort = abort
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self.handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def handle(self, sig: int, frame: FrameType | None) -> None:
        self.received.append(sig)
        if len(self.received) == 1:
            logger.info("%s: draining (a second signal exits at once)", signal.Signals(sig).name)
            self.drain()
            return
        try:
            print(f"{signal.Signals(sig).name} again: exiting now", file=sys.stderr, flush=True)
            self.abort()
        finally:
            os._exit(128 + sig)
