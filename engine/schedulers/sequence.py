"""The sequence batcher's bookkeeping: every request of one correlation id goes to one instance, in order."""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import ModelConfig
from engine.errors import InvalidArgument
from engine.types import InferenceRequest


@dataclass(slots=True)
class SequenceSlot:
    """Where a live sequence runs and when it was last heard from."""

    lane: int
    last_ns: int


class SequenceRouter:
    """Assigns each new sequence to the least busy instance lane and keeps it there until it ends or idles out."""

    def __init__(self, config: ModelConfig, lanes: int) -> None:
        self.model = config.name
        self.lanes = lanes
        idle_us = config.sequence_batching.max_sequence_idle_microseconds if config.sequence_batching else 0
        self.idle_ns = idle_us * 1000
        self.slots: dict[int | str, SequenceSlot] = {}

    def route(self, request: InferenceRequest, now_ns: int) -> int:
        """The lane of this request's sequence; starts and ends sequences as the flags say."""
        self.expire(now_ns)
        sequence_id = request.sequence_id
        if sequence_id in (0, ""):
            raise InvalidArgument(
                f"inference request to model '{self.model}' must specify a non-zero or non-empty correlation ID"
            )
        slot = self.slots.get(sequence_id)
        if request.sequence_start:
            if slot is None:
                slot = self.slots[sequence_id] = SequenceSlot(self._least_busy(), now_ns)
        elif slot is None:
            raise InvalidArgument(
                f"inference request for sequence {sequence_id} to model '{self.model}' must specify the START "
                "flag on the first request of the sequence"
            )
        slot.last_ns = now_ns
        if request.sequence_end:
            del self.slots[sequence_id]
        return slot.lane

    def _least_busy(self) -> int:
        counts = [0] * self.lanes
        for slot in self.slots.values():
            counts[slot.lane] += 1
        return counts.index(min(counts))

    def expire(self, now_ns: int) -> None:
        """Forget sequences idle for longer than max_sequence_idle_microseconds."""
        if not self.idle_ns:
            return
        stale = [sid for sid, slot in self.slots.items() if now_ns - slot.last_ns > self.idle_ns]
        for sid in stale:
            del self.slots[sid]
