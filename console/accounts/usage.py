"""Token usage kept over time: the engine's minute buckets (engine/llm/usage.py) added to the database off the
request path, by the runtime's `UsageRecorder`.

Every RECORD_SECONDS the recorder takes what this process's budget gate counted since the last time and adds it to
one `UsageMinute` row per (minute, user, token), which every replica adds to, so the console's chart shows the
cluster's usage (console/accounts/usage_chart.py). While the database does not answer the buckets wait in memory
(at most MAX_UNWRITTEN, the oldest dropped past that) and the outage is logged once; rows older than KEEP_DAYS are
deleted once an hour. The last buckets are written when the runtime stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.db.models import F

from console.accounts.models import UsageMinute
from console.layer_tasks import end_task
from console.outages import Outage
from engine.api import UsageLedger
from engine.api import UsageMinute as Bucket

logger = logging.getLogger("console.accounts.usage")

RECORD_SECONDS = 5.0
KEEP_DAYS = 31
PRUNE_SECONDS = 3600.0
MAX_UNWRITTEN = 100_000


def record(buckets: Iterable[Bucket]) -> None:
    """Add each bucket to its (minute, user, token) row, made when it is the first; all of them or none."""
    with transaction.atomic():
        for bucket in buckets:
            key = {"minute": bucket.minute, "user_id": bucket.user_id or 0, "token_id": bucket.token_id or 0}
            added = {
                "prompt": F("prompt") + bucket.prompt,
                "completion": F("completion") + bucket.completion,
                "cached": F("cached") + bucket.cached,
            }
            if UsageMinute.objects.filter(**key).update(**added):
                continue
            try:
                with transaction.atomic():
                    UsageMinute.objects.create(
                        **key,
                        user_name=bucket.user,
                        prompt=bucket.prompt,
                        completion=bucket.completion,
                        cached=bucket.cached,
                    )
            except IntegrityError:  # another replica made the row meanwhile: add to it
                UsageMinute.objects.filter(**key).update(**added)


def prune(now: float | None = None, keep_days: int = KEEP_DAYS) -> int:
    """Delete the rows older than `keep_days`; how many went."""
    oldest = int((time.time() if now is None else now) // 60) - keep_days * 24 * 60
    deleted, _ = UsageMinute.objects.filter(minute__lt=oldest).delete()
    return deleted


class UsageRecorder:
    """Writes `ledger`'s minute buckets to the database every `interval` seconds, in the background."""

    def __init__(self, ledger: UsageLedger, interval: float = RECORD_SECONDS) -> None:
        self.ledger = ledger
        self.interval = interval
        self.unwritten: list[Bucket] = []
        self.database = Outage("the database (token usage)")
        self._pruned_at = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-recorder")

    async def write(self) -> None:
        """Write what was counted since the last write (and what an outage held back); prune once an hour."""
        self.unwritten += self.ledger.take_minutes()
        if len(self.unwritten) > MAX_UNWRITTEN:
            dropped = len(self.unwritten) - MAX_UNWRITTEN
            logger.warning("token usage: %d minute counts not written while the database was down are dropped", dropped)
            del self.unwritten[:dropped]
        if not self.unwritten:
            return
        buckets, self.unwritten = self.unwritten, []
        try:
            await database_sync_to_async(record)(buckets)
            if time.monotonic() >= self._pruned_at + PRUNE_SECONDS:
                # by the ledger's clock, which dates the minutes: a row is as old as that clock says
                await database_sync_to_async(prune)(self.ledger.clock())
                self._pruned_at = time.monotonic()
        except Exception as exc:  # the database may be down: the next write retries
            self.unwritten = buckets + self.unwritten
            self.database.failed(exc)
            return
        self.database.recovered()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.write()

    async def stop(self) -> None:
        """Stop, after writing what is left."""
        task, self._task = self._task, None
        await end_task(task)
        await self.write()
