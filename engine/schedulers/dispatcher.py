"""The asyncio side of scheduling: the `Dispatcher` protocol every model version's scheduler follows, and the dynamic
batcher's: queue requests in batchers, hand batches to free instances, answer callers."""

from __future__ import annotations

import asyncio
import functools
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.config.model_config import ModelConfig
from engine.errors import BackendError, InferaError, Unavailable
from engine.schedulers.batcher import Batch, DynamicBatcher, PendingRequest
from engine.serving.devices import usable_cores
from engine.serving.instances import ModelInstance
from engine.serving.stats import ModelStats
from engine.serving.streams import StreamTimes
from engine.serving.tasks import cancel_and_wait
from engine.types import InferenceRequest, InferenceResponse

# A model serves one request at a time while the running average of the requests it has in flight when a batch
# leaves stays under ALONE_BELOW (weight IN_FLIGHT_WEIGHT for the newest): a lone request then may run inline at a
# dearer cost than usual, the loop having no one else to serve meanwhile. The average keeps a lull between bursts
# of concurrent requests from counting as such a time
IN_FLIGHT_WEIGHT = 0.1
ALONE_BELOW = 1.5


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
    result: tuple | None = None  # (result, error) as the instance answered
    done: bool = False


def _mark_compute(trace, start_ns: int, times) -> None:
    """The compute timestamps of a traced request, from its batch's start and phase durations."""
    trace.mark("COMPUTE_START", start_ns)
    trace.mark("COMPUTE_INPUT_END", start_ns + times.input_ns)
    trace.mark("COMPUTE_OUTPUT_START", start_ns + times.input_ns + times.infer_ns)
    trace.mark("COMPUTE_END", start_ns + times.input_ns + times.infer_ns + times.output_ns)


@runtime_checkable
class Dispatcher(Protocol):
    """What a model version (engine.serving.lifecycle) asks of its scheduler, whichever it is: DynamicDispatcher here,
    engine.schedulers.sequence_dispatcher.SequenceDispatcher, engine.ensembles.dispatcher.EnsembleDispatcher.

    The queries after `submit` have the answers of a scheduler with no sequences and no composing models; a
    scheduler that has them says so.
    """

    @property
    @abstractmethod
    def queued(self) -> int:
        """Requests waiting for a batch."""

    @abstractmethod
    def start(self) -> None:
        """Start taking requests, on the running loop."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop taking batches, wait for running ones, fail whatever is still queued."""

    @abstractmethod
    def submit(self, request: InferenceRequest) -> Awaitable[InferenceResponse]:
        """Queue a validated request; awaiting the result gives its response (or raises its failure)."""

    # whether its requests run on other models (an ensemble's steps): `recheck` it when they change
    composes: bool = False

    def recheck(self, config_of: Callable[[str, int | None], ModelConfig]) -> str | None:
        """After the models it is composed of changed: why it cannot serve with them now, or None."""
        return None

    @property
    def live_sequences(self) -> int:
        """Sequences under way here: a retired version keeps serving them before it unloads."""
        return 0

    def knows(self, sequence_id: int | str) -> bool:
        """Whether a sequence with this id is live here (its next requests belong to this version)."""
        return False

    async def sequences_ended(self) -> None:
        """Until no sequence is live here."""


class DynamicDispatcher(Dispatcher):
    """Drives one model version's batcher: wakes on arrivals, free instances and delay deadlines (sequence models
    have engine.schedulers.sequence_dispatcher).

    A batch forms while others compute: an instance that is idle while another runs takes what queued meanwhile.
    Several idle instances also share what is queued (each batch takes at most its share) when batches run on the
    instances' threads and there are cores for them beside the event loop's, so a compute-bound model keeps every
    core busy instead of one batch holding every caller. At most one batch per core beside the loop's computes on
    the CPU at once: on 2 cores a second instance's batch would start small and share the first one's core, so
    the next batch grows in the queue instead and starts as the running one ends, before that one's callers are
    answered (the loop encodes their responses while it computes). When every request the model has lately had in
    flight is back (a closed loop's callers, answered by the batch before), that next batch is queued on the
    running instance's thread at once, so it starts the moment the running one ends (see _stage). Batches cheap
    enough to run inline are never split or held; GPU instances and python models (their compute is not on these
    cores) are not counted.
    """

    def __init__(
        self,
        name: str,
        version: int,
        config: ModelConfig,
        instances: list[ModelInstance],
        stats: ModelStats,
        cores: int | None = None,
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
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it started on, which its futures belong to
        self._running = 0  # batches handed to instances and not answered
        self._running_requests = 0  # the requests in them
        self._on_cores = 0  # those computing on the CPU cores on instance threads (see _may_start)
        self._dispatching = False  # inside _dispatch: an inline batch's finish must not dispatch again
        # instances computing a batch on the CPU cores on their thread with none queued behind it (see _stage), and
        # the most requests the model has had in flight lately (queued or in batches)
        self._computing: list[ModelInstance] = []
        self._peak_in_flight = 0
        self._peak_reached = False  # since the last batch on the cores ended
        # running average of the requests the model had in flight when each batch left (see ALONE_BELOW)
        self._in_flight_avg = 0.0
        self._idle_again = asyncio.Event()  # set when nothing is running, for stop()
        self._idle_again.set()
        # batches that may compute at once on the CPU cores on instance threads, one core left to the event loop
        self.batch_cores = max(1, (cores or usable_cores()) - 1)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=f"dispatch-{self.name}-{self.version}")

    @property
    def queued(self) -> int:
        return sum(len(lane.batcher) for lane in self.lanes)

    def submit(self, request: InferenceRequest) -> asyncio.Future:
        """Queue a validated request; the future resolves to its InferenceResponse (or fails, the failure counted).

        Raises QueueFull at once when the queue is full.
        """
        now = time.monotonic_ns()
        if not request.arrival_ns:
            request.arrival_ns = now
        lane = self.lanes[0]
        batcher = lane.batcher
        loop = self._loop or asyncio.get_running_loop()
        pending = PendingRequest(request, loop.create_future(), now, () if batcher.uniform else batcher.key_of(request))
        if request.trace is not None:
            request.trace.mark("QUEUE_START", now)
        batcher.add(pending, now)
        self.stats.pending = batcher.size
        in_flight = batcher.size + self._running_requests
        returned = in_flight == self._peak_in_flight  # back to the peak (a new peak is no one's return)
        if in_flight >= self._peak_in_flight:
            self._peak_in_flight = in_flight
            self._peak_reached = True
        if self._may_start(lane):
            # an idle instance takes the batch on the loop's next turn: requests that arrive in this turn (callers
            # answered by the last batch) join it, and no hop through the dispatcher task is needed
            if not lane.dispatch_scheduled:
                lane.dispatch_scheduled = True
                loop.call_soon(self._dispatch_soon, lane)
        else:
            if returned and self._computing:
                self._stage(lane, now)
            self._wake.set()
        return pending.future

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic_ns()
            deadlines = []
            for lane in self.lanes:
                self._dispatch(lane, now)
                if len(lane.batcher) and self._may_start(lane):
                    deadline = lane.batcher.next_deadline()
                    if deadline is not None:
                        deadlines.append(deadline)
            await wake_or_deadline(self._wake, deadlines)

    def _may_start(self, lane: Lane) -> bool:
        """Whether a batch may start now: an idle instance, and a core for it beside the loop's unless it runs
        inline. While every such core computes a batch of this model, the next one grows in the queue instead of
        starting small and sharing a core (a batch's end dispatches it)."""
        idle = lane.idle
        if not idle:
            return False
        instance = idle[-1]
        return self._on_cores < self.batch_cores or not instance.on_cpu_cores or instance.runs_inline

    def _dispatch_soon(self, lane: Lane) -> None:
        lane.dispatch_scheduled = False
        self._dispatch(lane, time.monotonic_ns())
        if len(lane.batcher):
            # still queued: waiting for company (queue delay) or for a free instance; the task keeps time
            self._wake.set()

    def _dispatch(self, lane: Lane, now: int) -> None:
        """Expire timed-out requests, then hand batches to idle instances while the batcher releases them."""
        batcher = lane.batcher
        if batcher.timeouts:
            for p in batcher.expire(now):
                self._answer_timeout(p)
        idle = lane.idle
        self._dispatching = True
        try:
            self._hand_out(lane, batcher, idle, now)
        finally:
            self._dispatching = False

    def _hand_out(self, lane: Lane, batcher: DynamicBatcher, idle: list[ModelInstance], now: int) -> None:
        while idle and batcher.size:
            instance = idle[-1]
            inline = instance.runs_inline
            on_cores = instance.on_cpu_cores and not inline
            if on_cores and self._on_cores >= self.batch_cores:
                return
            # several idle instances, batches on their threads, cores for them: each takes its share of the queue
            ways = min(len(idle), self.batch_cores - self._on_cores)
            share = -(-batcher.inferences // ways) if ways > 1 and not inline else 0
            batch = batcher.next_batch(now, share)
            if batch is None:
                return
            idle.pop()
            if on_cores:
                self._computing.append(instance)
            self._start(lane, instance, batch, on_cores)

    def _stage(self, lane: Lane, now: int) -> None:
        """Queue the next batch on the thread of an instance computing on the CPU cores, behind its batch, once
        every request the model has lately had in flight is either in that batch or queued: callers in a closed
        loop are all back by then (64 connections on 2 cores: two groups take turns), and the thread starts the
        next batch the moment its batch ends instead of idling until the event loop, busy with the answers of the
        batch before, hands it over. Taking every queued request keeps the groups from splitting further."""
        batch = lane.batcher.next_batch(now, 0)
        if batch is None:
            return
        instance = self._computing.pop()
        self._start(lane, instance, batch, True)

    def _start(self, lane: Lane, instance: ModelInstance, batch: Batch, on_cores: bool) -> None:
        batcher = lane.batcher
        self.stats.pending = len(batcher)
        flight = Flight(batch, time.monotonic_ns())
        if self.preserve_ordering:
            self._flights.append(flight)
        requests = batch.requests
        # the batch is all the model has in flight, at a time of one request at a time: the loop would only
        # wait for it (ModelInstance.would_run_inline)
        in_flight = len(requests) + self._running_requests + batcher.size
        average = self._in_flight_avg = self._in_flight_avg + IN_FLIGHT_WEIGHT * (in_flight - self._in_flight_avg)
        alone = in_flight == 1 and average < ALONE_BELOW
        self._running += 1
        self._running_requests += len(requests)
        self._on_cores += on_cores
        self._idle_again.clear()
        instance.run(
            [p.request for p in requests],
            [p.request.batch_size for p in requests],
            functools.partial(self._finish, lane, instance, flight, on_cores),
            alone,
        )

    def _finish(self, lane: Lane, instance: ModelInstance, flight: Flight, on_cores: bool, result, error) -> None:
        self._running -= 1
        self._on_cores -= on_cores
        self._running_requests -= len(flight.batch.requests)
        if not self._running:
            self._idle_again.set()
        flight.result = (result, error)
        flight.done = True
        if on_cores:
            if not self._peak_reached:  # a burst's peak fades by a request a batch until the requests reach it
                self._peak_in_flight = max(self._peak_in_flight - 1, self._running_requests + lane.batcher.size)
            self._peak_reached = False
        if instance.queued_jobs:
            self._computing.append(instance)  # its staged batch computes now, with nothing behind it
        else:
            if on_cores:
                self._computing.remove(instance)
            lane.idle.append(instance)
        if lane.batcher.size and not self._dispatching:
            # a batch queued while this one computed: it goes to the instance before this one's callers are
            # answered, so the instance computes while the loop encodes and writes their responses
            self._dispatch(lane, time.monotonic_ns())
        if self.preserve_ordering:
            while self._flights and self._flights[0].done:
                self._answer(self._flights.popleft())
        else:
            self._answer(flight)
        if len(lane.batcher):
            self._wake.set()

    def _answer(self, flight: Flight) -> None:
        """Resolve every request of a finished batch; a failed batch fails only its own requests."""
        result, exc = flight.result
        requests = flight.batch.requests
        if exc is not None:
            error = exc if isinstance(exc, InferaError) else BackendError(f"model '{self.name}' failed: {exc}")
            for p in requests:
                self._fail(p, error)
            return
        outputs, times, whole = result
        done = time.monotonic_ns()
        stats = self.stats
        stats.record_batch(flight.batch.size, times, len(requests))
        name, version = self.name, self.version
        row = 0
        for p, out in zip(requests, outputs, strict=True):
            request = p.request
            start, row = row, row + request.batch_size
            if p.future.done():
                continue
            if request.trace is not None:
                _mark_compute(request.trace, flight.start_ns, times)
            if isinstance(out, InferaError):  # this request's own error (a python model's error response)
                self._fail(p, out)
                continue
            rows = (whole, start, row) if whole is not None else None
            p.future.set_result(InferenceResponse(name, version, out, request.id, rows=rows))
            if request.stream is not None:  # a decoupled model's request is done at its final response
                if stats.streams is not None:
                    stats.streams.opened()
                request.stream.when_final(functools.partial(record_stream, stats, p, flight.start_ns))
            else:
                stats.record_success(done - p.enqueue_ns, flight.start_ns - p.enqueue_ns, done, request.protocol)

    def _fail(self, pending: PendingRequest, error: InferaError) -> None:
        if not pending.future.done():
            pending.future.set_exception(error)
            self.stats.record_failure(time.monotonic_ns() - pending.enqueue_ns, pending.request.protocol)

    def _answer_timeout(self, pending: PendingRequest) -> None:
        self.stats.pending = self.queued
        self._fail(pending, Unavailable(f"inference request for model '{self.name}' timed out in the queue"))

    async def stop(self) -> None:
        """Stop taking batches, wait for running ones, fail whatever is still queued."""
        await cancel_and_wait(self._task)
        self._task = None
        await self._idle_again.wait()
        for lane in self.lanes:
            batcher = lane.batcher
            for p in batcher.expire(time.monotonic_ns() + 10**18) + batcher._candidates():
                self._fail(p, Unavailable(f"model '{self.name}' version {self.version} is unloading"))


# ---- shared with engine.schedulers.sequence_dispatcher


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
