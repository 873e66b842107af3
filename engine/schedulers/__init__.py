"""Schedulers: bookkeeping that turns queued requests into batches (no I/O, no threads)."""

from engine.schedulers.batcher import Batch, DynamicBatcher, PendingRequest

__all__ = ["Batch", "DynamicBatcher", "PendingRequest"]
