"""Starting a service once with its ASGI server, and stopping it: the one lifespan handler every Infera app uses.

uvicorn sends ASGI lifespan events; daphne sends none, so the first connection starts the service instead. A start
runs as a task of its own, so a client that goes away cannot cancel it. `wait_for_start` decides whether start-up
(and a first connection) waits for the service: the standalone engine waits for its models, the console answers at
once and says "ready" on /v2/health/ready only when they are in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger("infera.frontend")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Step = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class ServiceLifespan:
    """Starts `start` once (lifespan start-up or first connection) and runs `stop` at shutdown."""

    def __init__(self, start: Step = _nothing, stop: Step = _nothing, *, wait_for_start: bool = True) -> None:
        self._start = start
        self._stop = stop
        self.wait_for_start = wait_for_start
        self._task: asyncio.Task[None] | None = None

    @property
    def begun(self) -> bool:
        return self._task is not None

    def begin(self) -> asyncio.Task[None]:
        """Start the service in the background (once); the task ends when start-up is over."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._start(), name="service-start")
            self._task.add_done_callback(_log_failure)
        return self._task

    async def on_connection(self) -> None:
        """A connection arrived: start the service if no lifespan event did (and wait when asked to)."""
        if self._task is None or self.wait_for_start:
            task = self.begin()
            if self.wait_for_start:
                await asyncio.shield(task)

    async def shutdown(self) -> None:
        """Stop a start-up still running, then stop the service (only if it was ever begun)."""
        task, self._task = self._task, None
        if task is None:
            return
        if not task.done():
            task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await self._stop()

    async def handle(self, receive: Receive, send: Send) -> None:
        """Answer one ASGI lifespan conversation."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                task = self.begin()
                if self.wait_for_start:
                    try:
                        await asyncio.shield(task)
                    except Exception as exc:  # the server exits: say why
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self.shutdown()
                except Exception as exc:  # the process exits either way; say why it was not clean
                    log.exception("shutdown failed")
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("start-up failed", exc_info=task.exception())
