"""Ending the engine's background tasks: one way to cancel a task and wait until it has ended."""

from __future__ import annotations

import asyncio


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended; how it ended (its cancellation, an error)
    is not raised here, while a cancellation of the caller itself still is."""
    if task is None:
        return
    if not task.done():
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
