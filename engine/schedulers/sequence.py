"""The sequence batcher's bookkeeping: sequences, their instances and slots, batches, decided against an explicit clock.

Triton's two strategies. **direct**: every instance has `max_batch_size` slots; a new sequence takes the lowest free
slot of the least used instance or waits in the backlog; a batch carries each occupied slot's next request at the
slot's position, and a slot without one is a filler (READY false). **oldest**: every instance keeps up to
`max_candidate_sequences` sequences; among those with a request waiting, the oldest form a batch, one request per
sequence, preferring `preferred_batch_size`, within `max_queue_delay_microseconds`. In both, a sequence's requests
run in order (one at a time), a slot frees at END or when the sequence idles out, and the backlog moves up.

Beyond Triton: the backlog holds at most `max_backlog` sequences (a START past it is refused, SequenceBacklogFull),
one caller may have at most `max_per_caller` sequences open (TooManySequences), and a queued request whose caller
went away leaves its queue (`abandon`); a sequence whose START had not run yet ends with it, so clients that send
a START and disconnect hold no slot and no place in the backlog.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.config.model_config import ModelConfig
from engine.errors import InferaError, InvalidArgument, Unavailable
from engine.schedulers.batcher import PendingRequest
from engine.settings import SequenceLimits


class SequenceBacklogFull(Unavailable):
    """A new sequence would wait behind `max_backlog` others for a slot: refused, retry later (HTTP 503)."""

    def __init__(self, model: str, max_backlog: int) -> None:
        self.model = model
        self.max_backlog = max_backlog
        super().__init__(
            f"model '{model}' has {max_backlog} sequences waiting for a slot already, the most it keeps "
            "(INFERA_SEQUENCE_MAX_BACKLOG): a new sequence's START is refused, retry later"
        )


class TooManySequences(InferaError):
    """A caller has `max_per_caller` sequences of this model open already: a new START is refused (HTTP 429)."""

    status = 429

    def __init__(self, model: str, max_per_caller: int) -> None:
        self.model = model
        self.max_per_caller = max_per_caller
        super().__init__(
            f"this caller has {max_per_caller} sequences of model '{model}' open already, the most one caller may "
            "(INFERA_SEQUENCE_MAX_PER_CALLER): end one (or let it idle out) before starting another"
        )


@dataclass(slots=True, eq=False)
class Sequence:
    """One live correlation id: where it runs, what waits, its implicit state."""

    id: int | str
    start_ns: int
    last_ns: int
    caller: Hashable | None = None  # who started it (engine.types.current_caller), None for the engine itself
    lane: int = -1  # its instance; -1 while it waits in the backlog
    slot: int = -1  # direct: its batch slot on that instance
    queue: deque[PendingRequest] = field(default_factory=deque)
    state: dict[str, np.ndarray] = field(default_factory=dict)  # input_name -> value, without the batch dimension
    fresh: bool = True  # its START request has not run yet
    running: bool = False
    ending: bool = False  # its END request is queued or running


@dataclass(slots=True)
class SequenceBatch:
    """Requests for one instance: `entries` in batch order, None where a direct slot has no request (a filler)."""

    lane: int
    entries: list[PendingRequest | None]

    @property
    def requests(self) -> list[PendingRequest]:
        return [entry for entry in self.entries if entry is not None]

    @property
    def size(self) -> int:
        return len(self.entries)


class SequenceBatcher:
    """Every live sequence of one model version and the batches their requests form on `lanes` instances."""

    def __init__(
        self,
        config: ModelConfig,
        lanes: int,
        max_backlog: int = SequenceLimits.max_backlog,
        max_per_caller: int = SequenceLimits.max_per_caller,
    ) -> None:
        sequencing = config.sequence_batching
        if sequencing is None:
            raise ValueError(f"model '{config.name}' has no sequence_batching")
        self.model = config.name
        self.lanes = lanes
        self.direct = sequencing.strategy != "oldest"
        self.max_batch_size = max(config.max_batch_size, 1)
        self.idle_ns = sequencing.max_sequence_idle_microseconds * 1000
        self.delay_ns = sequencing.max_queue_delay_microseconds * 1000
        self.minimum_utilization = sequencing.minimum_slot_utilization
        self.candidates = sequencing.max_candidate_sequences or self.max_batch_size
        self.preferred = sorted({p for p in sequencing.preferred_batch_size if 0 < p <= self.max_batch_size})
        self.sequences: dict[int | str, Sequence] = {}
        self.backlog: deque[Sequence] = deque()
        # direct: slots[lane][slot] is the sequence holding it; oldest: the lane's candidate sequences
        self.slots: list[list[Sequence | None]] = [[None] * self.max_batch_size for _ in range(lanes)]
        self.members: list[list[Sequence]] = [[] for _ in range(lanes)]
        self.queued = 0
        self.max_backlog = max_backlog
        self.max_per_caller = max_per_caller
        self.open_by_caller: dict[Hashable, int] = {}  # callers with sequences open, and how many
        self.abandoned = 0  # queued requests taken out because their callers went away

    # ---- requests in

    def add(self, pending: PendingRequest, now_ns: int, caller: Hashable | None = None) -> Sequence:
        """File a request under its sequence (starting one at START, for `caller`); InvalidArgument as Triton words
        it otherwise, SequenceBacklogFull or TooManySequences past the limits."""
        request = pending.request
        sequence_id = request.sequence_id
        if sequence_id in (0, ""):
            raise InvalidArgument(
                f"inference request to model '{self.model}' must specify a non-zero or non-empty correlation ID"
            )
        if request.batch_size != 1:
            raise InvalidArgument(
                f"inference request to model '{self.model}' must specify batch-size 1 due to requirements of "
                "sequence batcher"
            )
        self.expire(now_ns)
        sequence = self.sequences.get(sequence_id)
        if request.sequence_start:
            if sequence is not None and not sequence.queue and not sequence.running:
                self._release(sequence)  # a START for a live id ends the old sequence and begins a new one
                sequence = None
            if sequence is None:
                if caller is not None and self.open_by_caller.get(caller, 0) >= self.max_per_caller > 0:
                    raise TooManySequences(self.model, self.max_per_caller)
                if len(self.backlog) >= self.max_backlog and self._free_lane() is None:
                    raise SequenceBacklogFull(self.model, self.max_backlog)
                sequence = Sequence(sequence_id, now_ns, now_ns, caller)
                if caller is not None:
                    self.open_by_caller[caller] = self.open_by_caller.get(caller, 0) + 1
                self.sequences[sequence_id] = sequence
                self._place(sequence)
        elif sequence is None or sequence.ending:
            raise InvalidArgument(
                f"inference request for sequence {sequence_id} to model '{self.model}' must specify the START flag "
                "on the first request of the sequence"
            )
        if request.sequence_end:
            sequence.ending = True
        sequence.last_ns = now_ns
        pending.enqueue_ns = pending.enqueue_ns or now_ns
        sequence.queue.append(pending)
        self.queued += 1
        return sequence

    def _place(self, sequence: Sequence) -> None:
        """Give a new sequence an instance (and a slot, direct) or put it in the backlog."""
        lane = self._free_lane()
        if lane is None:
            self.backlog.append(sequence)
            return
        sequence.lane = lane
        if self.direct:
            slot = self.slots[lane].index(None)
            self.slots[lane][slot] = sequence
            sequence.slot = slot
        else:
            self.members[lane].append(sequence)

    def _free_lane(self) -> int | None:
        used = [
            sum(s is not None for s in self.slots[lane]) if self.direct else len(self.members[lane])
            for lane in range(self.lanes)
        ]
        limit = self.max_batch_size if self.direct else self.candidates
        open_lanes = [lane for lane in range(self.lanes) if used[lane] < limit]
        return min(open_lanes, key=lambda lane: used[lane]) if open_lanes else None

    # ---- batches out

    def next_batch(self, lane: int, now_ns: int) -> SequenceBatch | None:
        """The batch instance `lane` should run now, or None to wait (until `next_deadline`, or for requests)."""
        ready = [s for s in self._lane_sequences(lane) if s.queue and not s.running]
        if not ready:
            return None
        oldest_wait = now_ns - min(s.queue[0].enqueue_ns for s in ready)
        if self.direct:
            utilization = len(ready) / self.max_batch_size
            if utilization < self.minimum_utilization and oldest_wait < self.delay_ns:
                return None
            top = max(s.slot for s in ready)
            entries: list[PendingRequest | None] = [None] * (top + 1)
            for sequence in ready:
                entries[sequence.slot] = self._take(sequence)
            return SequenceBatch(lane, entries)
        ready.sort(key=lambda s: s.queue[0].enqueue_ns)
        chosen = ready[: self.max_batch_size]
        count = len(chosen)
        best = max((p for p in self.preferred if p <= count), default=0)  # a preferred size goes at once
        if count < self.max_batch_size and not best and oldest_wait < self.delay_ns:
            return None
        if best:
            chosen = chosen[:best]
        return SequenceBatch(lane, [self._take(sequence) for sequence in chosen])

    def _take(self, sequence: Sequence) -> PendingRequest:
        sequence.running = True
        self.queued -= 1
        return sequence.queue.popleft()

    def _lane_sequences(self, lane: int) -> list[Sequence]:
        if self.direct:
            return [s for s in self.slots[lane] if s is not None]
        return list(self.members[lane])

    def next_deadline(self, lane: int) -> int | None:
        """When a waiting batch of `lane` must go (its oldest request's delay), if it is waiting on one."""
        ready = [s for s in self._lane_sequences(lane) if s.queue and not s.running]
        if not ready or not self.delay_ns:
            return None
        return min(s.queue[0].enqueue_ns for s in ready) + self.delay_ns

    def idle_deadline(self) -> int | None:
        """When the next idle sequence times out, if any can."""
        if not self.idle_ns:
            return None
        idle = [s.last_ns for s in self.sequences.values() if not s.queue and not s.running]
        return min(idle) + self.idle_ns if idle else None

    # ---- answers back

    def finished(self, pending: PendingRequest, now_ns: int) -> Sequence | None:
        """A request of a sequence ran (or failed): the sequence may take its next; END releases its place."""
        sequence = self.sequences.get(pending.request.sequence_id)
        if sequence is None:
            return None
        sequence.running = False
        sequence.fresh = False
        sequence.last_ns = now_ns
        if pending.request.sequence_end:
            self._release(sequence)
        return sequence

    def _release(self, sequence: Sequence) -> None:
        """The sequence is over: free its slot or candidacy and move the backlog up."""
        if self.sequences.get(sequence.id) is sequence:
            del self.sequences[sequence.id]
            caller = sequence.caller
            if caller is not None:
                left = self.open_by_caller.pop(caller) - 1
                if left:
                    self.open_by_caller[caller] = left
        if sequence in self.backlog:
            self.backlog.remove(sequence)
            return
        if sequence.lane >= 0:
            if self.direct:
                self.slots[sequence.lane][sequence.slot] = None
            else:
                self.members[sequence.lane].remove(sequence)
        while self.backlog and self._free_lane() is not None:
            self._place(self.backlog.popleft())

    def abandon(self, pending: PendingRequest) -> list[PendingRequest]:
        """A queued request whose caller went away leaves its sequence's queue (one already in a batch stays).

        A sequence whose START has not run ends with its START (its slot or its place in the backlog frees), or
        when nothing of it is left queued; its other queued requests are returned, for the caller to fail.
        """
        sequence = self.sequences.get(pending.request.sequence_id)
        if sequence is None or not any(p is pending for p in sequence.queue):
            return []
        sequence.queue.remove(pending)
        self.queued -= 1
        self.abandoned += 1
        sequence.ending = any(p.request.sequence_end for p in sequence.queue)
        if not sequence.fresh or sequence.running:
            return []
        if not pending.request.sequence_start and sequence.queue:
            return []
        orphans = list(sequence.queue)
        sequence.queue.clear()
        self.queued -= len(orphans)
        self._release(sequence)
        return orphans

    def expire(self, now_ns: int) -> list[Sequence]:
        """Forget sequences idle for longer than max_sequence_idle_microseconds (their places free up)."""
        if not self.idle_ns:
            return []
        stale = [
            s for s in self.sequences.values() if not s.queue and not s.running and now_ns - s.last_ns > self.idle_ns
        ]
        for sequence in stale:
            self._release(sequence)
        return stale

    def drop_all(self) -> list[PendingRequest]:
        """Every queued request, taken out (the version is unloading)."""
        dropped = [p for s in self.sequences.values() for p in s.queue]
        for sequence in self.sequences.values():
            sequence.queue.clear()
        self.queued = 0
        return dropped

    # ---- numbers for stats and charts

    @property
    def live(self) -> int:
        return len(self.sequences)

    def slots_in_use(self) -> int:
        return sum(s is not None for lane in self.slots for s in lane) if self.direct else sum(map(len, self.members))

    def capacity(self) -> int:
        return self.lanes * (self.max_batch_size if self.direct else self.candidates)

    def knows(self, sequence_id: Any) -> bool:
        return sequence_id in self.sequences
