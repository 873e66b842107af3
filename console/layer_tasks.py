"""Ending a task that receives from the channel layer: cancelled again until it has ended.

channels_redis (4.3, over redis-py 8.1, Python 3.11) can lose a cancellation: a receive that holds the layer's
receive lock when its task is cancelled sometimes never sees the CancelledError, and goes on reading Redis for
ever, its task still `cancelling()`. A stop that cancelled once and awaited the task then never returned: a replica
under load hung in its drain after SIGTERM (tests/console/test_layer_tasks.py shows the lost cancellation on a
real Redis). A second cancellation ends such a task.
"""

from __future__ import annotations

import asyncio
from typing import Any

RECANCEL_SECONDS = 0.5  # how long a cancelled task may run before it is cancelled again


async def end_task(task: asyncio.Task | None, recancel_seconds: float = RECANCEL_SECONDS) -> None:
    """Cancel `task` and wait until it has ended, cancelling it again every `recancel_seconds` it still runs;
    an exception it ended with (other than its cancellation) is raised here."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=recancel_seconds)
    if not task.cancelled():
        task.result()


async def receive_or_end(layer: Any, channel: str) -> dict:
    """`layer.receive(channel)` run as a task of its own, so that a cancellation always reaches the caller, which
    then ends the receive with `end_task`."""
    receiving = asyncio.ensure_future(layer.receive(channel))
    try:
        return await asyncio.shield(receiving)
    except asyncio.CancelledError:
        await end_task(receiving)
        raise


class EndingReceives:
    """A channel layer whose receives end when they are cancelled (`receive_or_end`); the rest is the layer's.
    For Channels' consumers, whose dispatch loop cancels the receive it waits on once when the socket closes."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.layer, name)

    async def receive(self, channel: str) -> dict:
        return await receive_or_end(self.layer, channel)
