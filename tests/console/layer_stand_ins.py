"""A channel layer that loses a cancellation as channels_redis' sometimes does (console/layer_tasks.py), and a bound
on how long stopping may take."""

from __future__ import annotations

import asyncio

from channels.layers import InMemoryChannelLayer

STOPPED_WITHIN_S = 30.0  # only a stop that waits on a lost cancellation for ever reaches this


class LosesOneCancellation(InMemoryChannelLayer):
    """An in-memory layer whose receives swallow their first cancellation and go on waiting, as channels_redis'
    sometimes do; `receiving` is set once a receive is under way, `active` counts those not ended."""

    def __init__(self) -> None:
        super().__init__()
        self.receiving = asyncio.Event()
        self.lost = 0
        self.active = 0

    async def receive(self, channel: str) -> dict:
        self.active += 1
        self.receiving.set()
        try:
            return await super().receive(channel)
        except asyncio.CancelledError:
            self.lost += 1
            return await super().receive(channel)  # nothing comes: it waits until cancelled again
        finally:
            self.active -= 1


async def ends_in_time(stopping) -> bool:
    """Whether `stopping` ends within STOPPED_WITHIN_S. Run apart: a deadline around the stop itself would cancel
    it, and that second cancellation would end the listener that lost the first."""
    task = asyncio.ensure_future(stopping)
    done, _ = await asyncio.wait({task}, timeout=STOPPED_WITHIN_S)
    if not done:
        task.cancel()
        await asyncio.wait({task})
    return bool(done)
