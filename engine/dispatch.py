"""The asyncio side of scheduling: queue requests in batchers, hand batches to free instances, answer callers."""

from __future__ import annotations

import asyncio
import functools
import time
from collections import deque
from dataclasses import dataclass

from engine.config import ModelConfig
from engine.errors import BackendError, InferaError, Unavailable
from engine.instances import ModelInstance
from engine.schedulers.batcher import Batch, DynamicBatcher, PendingRequest, shape_key
from engine.stats import ModelStats
from engine.streams import StreamTimes
from engine.types import InferenceRequest, InferenceResponse


@dataclass(slots=True)
class Lane:
    """A batcher and the instances that take its batches (all of them, or one per lane for sequences)."""

    batcher: DynamicBatcher
    idle: list[ModelInstance]
    dispatch_scheduled: bool = False


@dataclass(slots=True, eq=False)
class Flight:
    """A dispatched batch; with preserve_ordering its answers wait for every earlier batch."""

    batch: Batch
    start_ns: int
    result: asyncio.Future | None = None
    done: bool = False


def _mark_compute(trace, start_ns: int, times) -> None:
    """The compute timestamps of a traced request, from its batch's start and phase durations."""
    trace.mark("COMPUTE_START", start_ns)
    trace.mark("COMPUTE_INPUT_END", start_ns + times.input_ns)
    trace.mark("COMPUTE_OUTPUT_START", start_ns + times.input_ns + times.infer_ns)
    trace.mark("COMPUTE_END", start_ns + times.input_ns + times.infer_ns + times.output_ns)


class Dispatcher:
    """Drives one model version's batcher: wakes on arrivals, free instances and delay deadlines (sequence models
    have engine.sequence_dispatch)."""

    def __init__(
        self, name: str, version: int, config: ModelConfig, instances: list[ModelInstance], stats: ModelStats
    ) -> None:
        self.name = name
        self.version = version
        self.stats = stats
        self.lanes = [Lane(DynamicBatcher(config), list(instances))]
        db = config.dynamic_batching
        self.preserve_ordering = bool(db and db.preserve_ordering and len(instances) > 1)
        self._flights: deque[Flight] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Future] = set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch-{self.name}-{self.version}")

    @property
    def queued(self) -> int:
        return sum(len(lane.batcher) for lane in self.lanes)

    async def submit(self, request: InferenceRequest) -> InferenceResponse:
        """Queue a validated request and wait for its outputs; raises QueueFull when the queue is full."""
        loop = asyncio.get_running_loop()
        now = time.monotonic_ns()
        request.arrival_ns = request.arrival_ns or now
        lane = self.lanes[0]
        pending = PendingRequest(
            request=request,
            future=loop.create_future(),
            enqueue_ns=now,
            shape_key=shape_key(request, lane.batcher.batching),
        )
        if request.trace is not None:
            request.trace.mark("QUEUE_START", now)
        lane.batcher.add(pending, now)
        self.stats.pending = self.queued
        if lane.idle:
            # an idle instance takes the batch on the loop's next turn: requests that arrive in this turn (callers
            # answered by the last batch) join it, and no hop through the dispatcher task is needed
            if not lane.dispatch_scheduled:
                lane.dispatch_scheduled = True
                loop.call_soon(self._dispatch_soon, lane)
        else:
            self._wake.set()
        return await answer(pending, self.stats, self.name, self.version)

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic_ns()
            deadlines = []
            for lane in self.lanes:
                self._dispatch(lane, now)
                if lane.idle and len(lane.batcher):
                    deadline = lane.batcher.next_deadline()
                    if deadline is not None:
                        deadlines.append(deadline)
            await wake_or_deadline(self._wake, deadlines)

    def _dispatch_soon(self, lane: Lane) -> None:
        lane.dispatch_scheduled = False
        self._dispatch(lane, time.monotonic_ns())
        if len(lane.batcher):
            # still queued: waiting for company (queue delay) or for a free instance; the task keeps time
            self._wake.set()

    def _dispatch(self, lane: Lane, now: int) -> None:
        """Expire timed-out requests, then hand batches to idle instances while the batcher releases them."""
        for p in lane.batcher.expire(now):
            self._answer_timeout(p)
        while lane.idle:
            batch = lane.batcher.next_batch(now)
            if batch is None:
                return
            instance = lane.idle.pop()
            requests = batch.requests
            self.stats.pending = self.queued
            flight = Flight(batch, time.monotonic_ns())
            if self.preserve_ordering:
                self._flights.append(flight)
            future = instance.execute([p.request for p in requests], [p.batch_size for p in requests])
            self._running.add(future)
            future.add_done_callback(functools.partial(self._finish, lane, instance, flight))

    def _finish(self, lane: Lane, instance: ModelInstance, flight: Flight, future: asyncio.Future) -> None:
        self._running.discard(future)
        flight.result = future
        flight.done = True
        lane.idle.append(instance)
        if self.preserve_ordering:
            while self._flights and self._flights[0].done:
                self._answer(self._flights.popleft())
        else:
            self._answer(flight)
        if len(lane.batcher):
            self._wake.set()

    def _answer(self, flight: Flight) -> None:
        """Resolve every request of a finished batch; a failed batch fails only its own requests."""
        future = flight.result
        requests = flight.batch.requests
        exc = future.exception() if not future.cancelled() else Unavailable(f"model '{self.name}' stopped")
        if exc is not None:
            error = exc if isinstance(exc, InferaError) else BackendError(f"model '{self.name}' failed: {exc}")
            for p in requests:
                if not p.future.done():
                    p.future.set_exception(error)
            return
        outputs, times = future.result()
        done = time.monotonic_ns()
        for p in requests:
            if p.request.trace is not None:
                _mark_compute(p.request.trace, flight.start_ns, times)
        self.stats.record_batch(flight.batch.size, times, len(requests))
        for p, out in zip(requests, outputs, strict=True):
            if p.future.done():
                continue
            if isinstance(out, InferaError):  # this request's own error (a python model's error response)
                p.future.set_exception(out)
            elif p.request.stream is not None:  # a decoupled model's request is done at its final response
                p.future.set_result(out)
                if self.stats.streams is not None:
                    self.stats.streams.opened()
                p.request.stream.when_final(functools.partial(record_stream, self.stats, p, flight.start_ns))
            else:
                p.future.set_result(out)
                self.stats.record_success(done - p.enqueue_ns, flight.start_ns - p.enqueue_ns, done, p.request.protocol)

    def _answer_timeout(self, pending: PendingRequest) -> None:
        self.stats.pending = self.queued
        if not pending.future.done():
            message = f"inference request for model '{self.name}' timed out in the queue"
            pending.future.set_exception(Unavailable(message))

    async def stop(self) -> None:
        """Stop taking batches, wait for running ones, fail whatever is still queued."""
        await stop_task(self._task, self._running)
        self._task = None
        for lane in self.lanes:
            batcher = lane.batcher
            for p in batcher.expire(time.monotonic_ns() + 10**18) + batcher._candidates():
                if not p.future.done():
                    p.future.set_exception(Unavailable(f"model '{self.name}' version {self.version} is unloading"))


# ---- shared with engine.sequence_dispatch


async def answer(pending: PendingRequest, stats: ModelStats, name: str, version: int) -> InferenceResponse:
    """The response a queued request's future resolves to; a failure is counted and raised."""
    try:
        outputs = await pending.future
    except InferaError:
        stats.record_failure(time.monotonic_ns() - pending.enqueue_ns, pending.request.protocol)
        raise
    return InferenceResponse(model_name=name, model_version=version, outputs=outputs, id=pending.request.id)


def record_stream(stats: ModelStats, pending: PendingRequest, start_ns: int, times: StreamTimes) -> None:
    """A streamed request's final response: counted as a success or (when its last response is an error) a
    failure, its duration ending there."""
    duration = times.ended_ns - pending.enqueue_ns
    if times.failed:
        stats.record_failure(duration, pending.request.protocol)
    else:
        stats.record_success(duration, start_ns - pending.enqueue_ns, times.ended_ns, pending.request.protocol)
    if stats.streams is not None:
        stats.streams.closed(times)


async def wake_or_deadline(wake: asyncio.Event, deadlines: list[int]) -> None:
    """Wait until `wake` is set or the earliest deadline (time.monotonic_ns) passes."""
    if not deadlines:
        await wake.wait()
        return
    timeout = max(min(deadlines) - time.monotonic_ns(), 0) / 1e9
    try:
        await asyncio.wait_for(wake.wait(), timeout)
    except TimeoutError:
        pass


async def stop_task(task: asyncio.Task | None, running: set[asyncio.Future]) -> None:
    """Cancel a dispatcher's task and wait for the batches it started."""
    if task is not None:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    if running:
        await asyncio.wait(list(running))
