"""Starting a service once with its ASGI server, and stopping it: the one lifespan handler every Infera app uses.

uvicorn sends ASGI lifespan events; daphne sends none, so the first connection starts the service instead. A start
runs as a task of its own, so a client that goes away cannot cancel it. `wait_for_start` decides whether start-up
(and a first connection) waits for the service: the standalone engine waits for its models, the console answers at
once and says "ready" on /v2/health/ready only when they are in.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from engine.serving.tasks import cancel_and_wait

log = logging.getLogger("infera.frontend")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Step = Callable[[], Awaitable[None]]


async def _nothing() -> None:
    return None


class ServiceLifespan:
    """Starts `start` once (lifespan start-up or first connection) and runs `stop` at shutdown."""

    def __init__(
        self,
        start: Step = _nothing,
        stop: Step = _nothing,
        *,
        wait_for_start: bool = True,
        serving_process: bool = False,
    ) -> None:
        self._start = start
        self._stop = stop
        self.wait_for_start = wait_for_start
        # a serving process tunes the interpreter once started (see tune_serving_process); a library or a test
        # process that starts servers again and again never does
        self.serving_process = serving_process
        self._task: asyncio.Task[None] | None = None

    @property
    def begun(self) -> bool:
        return self._task is not None

    def begin(self) -> asyncio.Task[None]:
        """Start the service in the background (once); the task ends when start-up is over."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._start(), name="service-start")
            self._task.add_done_callback(self._after_start)
        return self._task

    def _after_start(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            log.error("start-up failed", exc_info=task.exception())
        elif self.serving_process:
            tune_serving_process()

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
        await cancel_and_wait(task)
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


# The GIL switch interval of a serving process (Python's default: 5 ms). An instance's worker thread needs the GIL
# for a moment after each batch (the runtime returns, its outputs are split); while the event loop runs Python
# (decoding the next requests) that thread waits until the loop blocks or the interval forces a switch, and the
# instance sits idle meanwhile: mlp_large at 64 connections over HTTP kept its instance busy 0.84 of the time with
# 5 ms, 0.91-0.93 with 0.5 and 0.2 ms (bench.cpu_split), 3.5k against 3.9-4.0k requests a second
SERVING_SWITCH_INTERVAL_S = 0.00025


def tune_serving_process() -> None:
    """What a serving process sets once its start-up is over: start-up's objects frozen out of full collections,
    and a short GIL switch interval (SERVING_SWITCH_INTERVAL_S)."""
    freeze_start_up_objects()
    sys.setswitchinterval(SERVING_SWITCH_INTERVAL_S)


def freeze_start_up_objects() -> None:
    """Leave what start-up made (modules, Django, the loaded models: most of the process's objects) out of the
    garbage collector's full collections, which would otherwise walk all of them every few thousand requests and
    stall the event loop each time (0.4-0.6 s for the console's 120k objects on the loaded 2-core machine). Start-up's
    own garbage is collected first. A frozen object freed later is still freed by its reference count; only cycles
    among frozen objects (a version loaded at start-up and unloaded later) stay, a bounded one-time amount, which is
    why only a serving process, started once, freezes (a test process starting servers again and again would keep
    every one of them)."""
    gc.collect()
    gc.freeze()
