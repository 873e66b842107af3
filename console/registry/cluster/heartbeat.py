"""The runtime's heartbeat: this replica's row in the replica table, renewed every few seconds until a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from channels.db import database_sync_to_async
from django.utils import timezone

from console.outages import Outage
from console.registry.cluster.states import beat, mark_stopped

logger = logging.getLogger("console.registry.cluster")

MAX_INTERVAL_SECONDS = 5.0


class Heartbeat:
    """Writes `name`'s row every `interval` seconds (a database outage is logged once and the beats go on); each beat
    forgets the gone rows of names `former` says this replica's processes had before (ProcessIdentity.former_name)."""

    def __init__(
        self, name: str, address: str, interval: float, *, former: Callable[[str], bool] = lambda name: False
    ) -> None:
        self.name = name
        self.former = former
        self.address = address
        self.interval = min(interval, MAX_INTERVAL_SECONDS)
        self.started_at = timezone.now()
        self.beats = 0
        self.database = Outage("the database (replica heartbeat)")
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """The first beat (the replica shows as live from now), then one every interval in the background."""
        await self.beat()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="replica-heartbeat")

    async def beat(self) -> None:
        try:
            await database_sync_to_async(beat)(self.name, self.address, self.interval, self.started_at, self.former)
        except Exception as exc:  # the database may be down: the next beat retries
            self.database.failed(exc)
            return
        self.database.recovered()
        self.beats += 1

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.beat()

    async def stop(self) -> None:
        """Stop beating and mark the replica stopped, so it is not counted from now on."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await database_sync_to_async(mark_stopped)(self.name)
        except Exception:  # it goes gone when its heartbeat runs out instead
            logger.warning(
                "could not mark replica '%s' stopped; it counts as gone after its heartbeat runs out", self.name
            )
