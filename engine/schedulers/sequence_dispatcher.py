"""The asyncio side of the sequence batcher: file requests under their sequences, run each instance's batches, answer.

engine.schedulers.sequence decides (against the clock this passes in); engine.schedulers.sequence_inputs adds the
control tensors and implicit state; this drives the instances and keeps the stats. A caller that goes away (the
front end cancels its task: a dropped HTTP connection, a cancelled gRPC call) takes its queued request out, and a
sequence whose START had not run yet ends with it.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

from engine.config.model_config import ModelConfig
from engine.errors import BackendError, InferaError, InvalidArgument, Unavailable
from engine.schedulers.batcher import PendingRequest
from engine.schedulers.dispatcher import Dispatcher, answer, wake_or_deadline
from engine.schedulers.sequence import SequenceBatch, SequenceBatcher
from engine.schedulers.sequence_inputs import SequenceInputs
from engine.serving.instances import ModelInstance
from engine.serving.stats import ModelStats
from engine.serving.tasks import cancel_and_wait
from engine.settings import SequenceLimits
from engine.types import InferenceRequest, InferenceResponse, current_caller


class SequenceDispatcher(Dispatcher):
    """Drives one model version's sequences over its instances (one lane per instance)."""

    def __init__(
        self,
        name: str,
        version: int,
        config: ModelConfig,
        instances: list[ModelInstance],
        stats: ModelStats,
        version_path: Path | None = None,
        limits: SequenceLimits | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.stats = stats
        self.instances = instances
        limits = limits or SequenceLimits()
        self.batcher = SequenceBatcher(config, len(instances), limits.max_backlog, limits.max_per_caller)
        self.inputs = SequenceInputs(config, version_path)
        self.busy = [False] * len(instances)
        self.no_sequences = asyncio.Event()
        self.no_sequences.set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Future] = set()
        self._scheduled: set[int] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"sequences-{self.name}-{self.version}")

    @property
    def queued(self) -> int:
        return self.batcher.queued

    @property
    def live_sequences(self) -> int:
        return self.batcher.live

    def knows(self, sequence_id: int | str) -> bool:
        """Whether a sequence with this id is live here (its next requests belong to this version)."""
        return self.batcher.knows(sequence_id)

    async def sequences_ended(self) -> None:
        await self.no_sequences.wait()

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        """File a request under its sequence and wait for its outputs; InvalidArgument as Triton words it."""
        loop = asyncio.get_running_loop()
        now = time.monotonic_ns()
        request.arrival_ns = request.arrival_ns or now
        self.inputs.check(request, self.name)
        pending = PendingRequest(request=request, future=loop.create_future(), enqueue_ns=now)
        if request.trace is not None:
            request.trace.mark("QUEUE_START", now)
        sequence = self.batcher.add(pending, now, current_caller.get())
        self._update_stats()
        if sequence.lane >= 0 and not self.busy[sequence.lane] and sequence.lane not in self._scheduled:
            self._scheduled.add(sequence.lane)  # requests arriving in this turn of the loop join the batch
            loop.call_soon(self._dispatch_soon, sequence.lane)
        try:
            return await answer(pending, self.stats, self.name, self.version)
        except asyncio.CancelledError:
            self._abandon(pending)
            raise

    def _abandon(self, pending: PendingRequest) -> None:
        """The caller of a request went away: out of the queue, and its sequence too when its START never ran."""
        request = pending.request
        for orphan in self.batcher.abandon(pending):
            if not orphan.future.done():
                orphan.future.set_exception(
                    InvalidArgument(
                        f"inference request for sequence {request.sequence_id} to model '{self.name}' was dropped: "
                        "the sequence's START request was cancelled before it ran (its client went away)"
                    )
                )
        self._update_stats()
        self._wake.set()  # a freed slot goes to the backlog's next sequence

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic_ns()
            deadlines = []
            self.batcher.expire(now)  # idle sequences end; their slots go to the backlog
            for lane in range(len(self.instances)):
                self._dispatch(lane, now)
                if not self.busy[lane]:
                    deadline = self.batcher.next_deadline(lane)
                    if deadline is not None:
                        deadlines.append(deadline)
            idle = self.batcher.idle_deadline()
            if idle is not None:
                deadlines.append(idle + 1)
            self._update_stats()
            await wake_or_deadline(self._wake, deadlines)

    def _dispatch_soon(self, lane: int) -> None:
        self._scheduled.discard(lane)
        self._dispatch(lane, time.monotonic_ns())
        self._wake.set()  # the task keeps time for what still waits (a queue delay, the idle timeout)

    def _dispatch(self, lane: int, now: int) -> None:
        if self.busy[lane]:
            return
        batch = self.batcher.next_batch(lane, now)
        if batch is None:
            return
        self.busy[lane] = True
        like = batch.requests[0].request
        requests = [
            self.inputs.build(None, {}, like)
            if entry is None
            else self.inputs.build(entry.request, self.batcher.sequences[entry.request.sequence_id].state, like)
            for entry in batch.entries
        ]
        self._update_stats()
        future = self.instances[lane].execute(requests, [1] * len(requests))
        self._running.add(future)
        future.add_done_callback(functools.partial(self._finish, batch, time.monotonic_ns()))

    def _finish(self, batch: SequenceBatch, start_ns: int, future: asyncio.Future) -> None:
        self._running.discard(future)
        self.busy[batch.lane] = False
        now = time.monotonic_ns()
        exc = future.exception() if not future.cancelled() else Unavailable(f"model '{self.name}' stopped")
        if exc is not None:
            error = exc if isinstance(exc, InferaError) else BackendError(f"model '{self.name}' failed: {exc}")
            for pending in batch.requests:
                self.batcher.finished(pending, now)
                if not pending.future.done():
                    pending.future.set_exception(error)
        else:
            outputs, times = future.result()
            self.stats.record_batch(len(batch.requests), times, len(batch.requests))
            for entry, out in zip(batch.entries, outputs, strict=True):
                if entry is None:
                    continue  # a filler's outputs belong to no one
                self._answer(entry, out, start_ns, now)
        self._update_stats()
        self._wake.set()

    def _answer(self, pending: PendingRequest, out, start_ns: int, now: int) -> None:
        sequence = self.batcher.sequences.get(pending.request.sequence_id)
        if not isinstance(out, InferaError) and sequence is not None:
            out = self.inputs.absorb(out, sequence.state)
        self.batcher.finished(pending, now)
        if pending.future.done():
            return
        if isinstance(out, InferaError):
            pending.future.set_exception(out)
            return
        pending.future.set_result(out)
        waited = start_ns - pending.enqueue_ns
        self.stats.record_success(now - pending.enqueue_ns, waited, now, pending.request.protocol)

    def _update_stats(self) -> None:
        batcher = self.batcher
        self.stats.pending = batcher.queued
        self.stats.sequences = {
            "live": batcher.live,
            "backlog": len(batcher.backlog),
            "slots_used": batcher.slots_in_use(),
            "slots": batcher.capacity(),
        }
        if batcher.live:
            self.no_sequences.clear()
        else:
            self.no_sequences.set()

    async def stop(self) -> None:
        """Stop taking batches, wait for running ones, fail whatever is still queued."""
        await cancel_and_wait(self._task)
        self._task = None
        if self._running:
            await asyncio.wait(list(self._running))
        for pending in self.batcher.drop_all():
            if not pending.future.done():
                pending.future.set_exception(Unavailable(f"model '{self.name}' version {self.version} is unloading"))
