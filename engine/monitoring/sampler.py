"""One snapshot of every model and device per interval, kept for 15 minutes and pushed to subscribers.

The sampler reads the engine's cumulative stats (engine/serving/stats.py) and turns the difference between two samples
into rates, latency percentiles, queue and compute time and batch sizes for that interval. One sampler feeds
every consumer (the WebSocket group, the page's backlog); a subscriber costs one call per snapshot.

Each snapshot also carries `server`: the whole server's requests/s, failures/s, error rate and p99 (the slowest
model's), counting only what clients sent through a front end (a request to an ensemble is one request). The
sampler keeps an hour of per-minute figures (engine/monitoring/history.py); the snapshot in which a minute closes
carries that minute as `minute`, and that one and one every HOUR_EVERY_SECONDS carry the hour's figures as `hour`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.monitoring.devices import DeviceSample, DeviceSampler
from engine.monitoring.history import Interval, MinuteHistory, server_figures
from engine.monitoring.llm import llm_entry, llm_metrics
from engine.serving.stats import CLIENT_PROTOCOLS
from engine.serving.tasks import cancel_and_wait

if TYPE_CHECKING:
    from engine.llm.metrics import LLMMetrics
    from engine.serving.server import InferenceServer
    from engine.serving.stats import ModelStats

log = logging.getLogger("engine.monitoring")

BACKLOG_SECONDS = 15 * 60
HOUR_EVERY_SECONDS = 10  # how often a snapshot carries the hour's figures (each costs a merge of its minutes)
PERCENTILES = (50, 95, 99)

Snapshot = dict[str, Any]
Subscriber = Callable[[Snapshot], Awaitable[None] | None]


@dataclass(slots=True, frozen=True)
class _Counters:
    """The cumulative numbers of one model version that the sampler turns into per-interval values."""

    success: int
    success_ns: int
    failure: int
    inferences: int
    executions: int
    queue_count: int
    queue_ns: int
    compute_count: int
    compute_ns: int
    batches: dict[int, int]  # batch size -> executions
    protocols: dict[str, int]  # front end -> requests answered (successes and failures)
    client_success: int  # through a front end (not an ensemble's steps, BLS, shadow copies, warm-up, analyses)
    client_failure: int
    # a decoupled model's streams: responses sent, first responses and gaps between responses (count, ns)
    stream_responses: int = 0
    first_count: int = 0
    first_ns: int = 0
    between_count: int = 0
    between_ns: int = 0
    llm: LLMMetrics | None = None  # a language model's numbers (engine/monitoring/llm.py)

    @classmethod
    def read(cls, stats: ModelStats, llm: LLMMetrics | None = None) -> _Counters:
        streams = stats.streams
        stream_counts = (
            {
                "stream_responses": streams.responses,
                "first_count": streams.first_response_count,
                "first_ns": streams.first_response_ns,
                "between_count": streams.between_count,
                "between_ns": streams.between_ns,
            }
            if streams is not None
            else {}
        )
        return cls(
            **stream_counts,
            llm=llm,
            success=stats.success.count,
            success_ns=stats.success.ns,
            failure=stats.fail.count,
            inferences=stats.inference_count,
            executions=stats.execution_count,
            queue_count=stats.queue.count,
            queue_ns=stats.queue.ns,
            compute_count=stats.compute_infer.count,
            compute_ns=stats.compute_input.ns + stats.compute_infer.ns + stats.compute_output.ns,
            batches={size: b.compute_infer.count for size, b in stats.batches.items()},
            protocols={name: sum(counts) for name, counts in stats.protocols.items()},
            client_success=sum(counts[0] for name, counts in stats.protocols.items() if name in CLIENT_PROTOCOLS),
            client_failure=sum(counts[1] for name, counts in stats.protocols.items() if name in CLIENT_PROTOCOLS),
        )

    def interval_since(self, before: _Counters, name: str, durations_ns: list[int]) -> Interval:
        """The requests between `before` and these counters."""
        return Interval(
            name=name,
            successes=self.success - before.success,
            failures=self.failure - before.failure,
            client_successes=self.client_success - before.client_success,
            client_failures=self.client_failure - before.client_failure,
            durations_ns=durations_ns,
        )


_ZERO = _Counters(0, 0, 0, 0, 0, 0, 0, 0, 0, {}, {}, 0, 0)


class MetricsSampler:
    """Samples `server` every `interval` seconds of `clock`; tests call `sample(now)` with a fake clock."""

    def __init__(
        self,
        server: InferenceServer,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 1.0,
        *,
        devices: DeviceSampler | None = None,
        use_nvml: bool | None = None,
        wall_clock: Callable[[], float] = time.time,
        backlog_seconds: float = BACKLOG_SECONDS,
        history: MinuteHistory | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the sampling interval must be positive, got {interval}")
        self.server = server
        self.clock = clock
        self.interval = interval
        self.wall_clock = wall_clock
        self.backlog_seconds = backlog_seconds
        self._devices = devices
        self._use_nvml = use_nvml
        self.subscribers: list[Subscriber] = []
        self.history = history if history is not None else MinuteHistory()
        self._backlog: deque[tuple[float, Snapshot]] = deque()
        # keyed by the stats object itself: a reloaded version has fresh stats counted from zero
        self._previous: dict[int, tuple[ModelStats, _Counters]] = {}
        self._last_time: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._hour_at: float | None = None  # when a snapshot last carried the hour's figures

    @property
    def devices(self) -> DeviceSampler:
        """The device sampler, made on first use (NVML start-up is not free)."""
        if self._devices is None:
            self._devices = DeviceSampler(use_nvml=self._use_nvml)
        return self._devices

    @property
    def latest(self) -> Snapshot | None:
        """The newest snapshot, or None before the first sample."""
        return self._backlog[-1][1] if self._backlog else None

    def subscribe(self, subscriber: Subscriber) -> Subscriber:
        """Call `subscriber(snapshot)` (plain or async) after every sample."""
        if subscriber not in self.subscribers:
            self.subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)

    def sample(self, now: float | None = None, devices: DeviceSample | None = None) -> Snapshot:
        """Take one snapshot at `now` (the clock's time), append it to the backlog and return it."""
        now = self.clock() if now is None else now
        elapsed = now - self._last_time if self._last_time is not None else 0.0
        first = self._last_time is None
        models = []
        intervals = []
        seen: dict[int, tuple[ModelStats, _Counters]] = {}
        for served in sorted(self.server.served_versions(), key=lambda s: (s.name, s.version)):
            stats = served.stats
            current = _Counters.read(stats, llm_metrics(served))
            before = self._previous.get(id(stats))
            if before is None or before[0] is not stats:
                # at the very first sample, history before us is not this interval's; later, a new version starts at 0
                before = (stats, current if first else _ZERO)
            seen[id(stats)] = (stats, current)
            durations = _interval_durations(stats, current.success - before[1].success)
            entry = _model_entry(stats, before[1], current, elapsed, durations)
            entry["state"] = getattr(getattr(served, "state", None), "value", None)
            models.append(entry)
            intervals.append(current.interval_since(before[1], stats.name, durations))
        self._previous = seen
        self._last_time = now
        device_sample = devices if devices is not None else self.devices.sample()
        wall = self.wall_clock()
        snapshot: Snapshot = {
            "t": round(wall * 1000),
            "interval": round(elapsed, 3),
            "models": models,
            "server": _server_now(intervals, models, elapsed),
            "devices": device_sample.to_dict(),
        }
        closed = self.history.add(wall, elapsed, intervals)
        if closed is not None:
            snapshot["minute"] = closed
        if closed is not None or self._hour_at is None or now - self._hour_at >= HOUR_EVERY_SECONDS:
            snapshot["hour"] = self.history.summary()
            self._hour_at = now
        self._backlog.append((now, snapshot))
        self._trim(now)
        return snapshot

    def backlog(self, seconds: float | None = None, model: str | None = None) -> list[Snapshot]:
        """Snapshots of the last `seconds` (all kept when None), narrowed to `model` when given."""
        if not self._backlog:
            return []
        newest = self._backlog[-1][0]
        since = newest - seconds if seconds is not None else -math.inf
        return [narrow(s, model) for t, s in self._backlog if t > since]

    def _trim(self, now: float) -> None:
        while self._backlog and self._backlog[0][0] <= now - self.backlog_seconds:
            self._backlog.popleft()

    async def publish(self, snapshot: Snapshot) -> None:
        """Hand `snapshot` to every subscriber; one failing subscriber does not starve the others."""
        for subscriber in list(self.subscribers):
            try:
                result = subscriber(snapshot)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # noqa: BLE001 - a broken subscriber must not stop the sampler
                log.exception("a metrics subscriber failed; it stays subscribed")

    async def run(self) -> None:
        """Sample and publish every `interval` until cancelled, on a fixed cadence that does not drift."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            # NVML and psutil calls block; off the event loop so inference is not held up
            try:
                devices = await asyncio.to_thread(self.devices.sample)
                await self.publish(self.sample(devices=devices))
            except Exception:  # noqa: BLE001 - one bad tick must not end live monitoring
                log.exception("a metrics sample failed; sampling goes on")
            next_at += self.interval
            delay = next_at - loop.time()
            if delay < 0:  # we fell behind (a busy loop): skip missed ticks rather than burst
                next_at = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> asyncio.Task[None]:
        """Run the sampler as a task of the running loop (once)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="infera-metrics-sampler")
        return self._task

    async def stop(self) -> None:
        """Cancel the sampling task and wait for it to end."""
        task, self._task = self._task, None
        await cancel_and_wait(task)


def narrow(snapshot: Snapshot, model: str | None) -> Snapshot:
    """`snapshot` with only `model`'s entries (the same object when `model` is None)."""
    if model is None:
        return snapshot
    return {**snapshot, "models": [m for m in snapshot["models"] if m["name"] == model]}


def _server_now(intervals: list[Interval], models: list[dict[str, Any]], elapsed: float) -> dict[str, Any]:
    """The whole server over the interval: clients' requests (not the calls an ensemble, BLS or a shadow makes inside
    the server), the slowest model's p99."""
    p99s = [entry["latency_ms"]["p99"] for entry in models if entry["latency_ms"] is not None]
    requests = sum(interval.client_requests for interval in intervals)
    failures = sum(interval.client_failures for interval in intervals)
    return server_figures(requests, failures, elapsed, max(p99s, default=None))


def _model_entry(
    stats: ModelStats, before: _Counters, now: _Counters, elapsed: float, durations: list[int]
) -> dict[str, Any]:
    def rate(current: int, previous: int) -> float:
        return round((current - previous) / elapsed, 3) if elapsed > 0 else 0.0

    new_successes = now.success - before.success
    queue_count = now.queue_count - before.queue_count
    compute_count = now.compute_count - before.compute_count
    return {
        "name": stats.name,
        "version": stats.version,
        # cumulative, as /metrics counts them (nv_inference_request_success, _failure): sums across replicas check out
        "success_count": now.success,
        "failure_count": now.failure,
        "success_per_s": rate(now.success, before.success),
        "failure_per_s": rate(now.failure, before.failure),
        "inferences_per_s": rate(now.inferences, before.inferences),
        "executions_per_s": rate(now.executions, before.executions),
        "latency_ms": _latency_percentiles(durations),
        # the mean request latency of the interval's successes: means add up along an ensemble's steps
        "mean_latency_ms": _mean_ms(now.success_ns - before.success_ns, new_successes),
        "queue_ms": _mean_ms(now.queue_ns - before.queue_ns, queue_count),
        "compute_ms": _mean_ms(now.compute_ns - before.compute_ns, compute_count),
        "batch_sizes": {
            str(size): count - before.batches.get(size, 0)
            for size, count in sorted(now.batches.items())
            if count - before.batches.get(size, 0) > 0
        },
        "pending": stats.pending,
        # a sequence model's live sequences, slots in use and backlog (None for other models)
        "sequences": dict(stats.sequences) if stats.sequences is not None else None,
        # requests per second by the front end they came through (HTTP, gRPC)
        "protocols": {
            name: rate(count, before.protocols.get(name, 0)) for name, count in sorted(now.protocols.items())
        },
        # a decoupled model's streams (a generator's tokens); None for other models
        "streams": None
        if stats.streams is None
        else {
            "in_flight": stats.streams.in_flight,
            "responses_per_s": rate(now.stream_responses, before.stream_responses),
            "first_response_ms": _mean_ms(now.first_ns - before.first_ns, now.first_count - before.first_count),
            "between_responses_ms": _mean_ms(
                now.between_ns - before.between_ns, now.between_count - before.between_count
            ),
        },
        # a language model's sequences, KV cache, prefix cache, tokens and times; None for other models
        "llm": llm_entry(now.llm, before.llm, elapsed),
    }


def _interval_durations(stats: ModelStats, new_successes: int) -> list[int]:
    """Request durations (ns, sorted) of the requests that succeeded since the previous sample.

    `recent` grows by one entry per success, so the interval's requests are its last `new_successes` entries;
    counting them, rather than comparing timestamps, keeps this exact under any clock.
    """
    count = min(new_successes, len(stats.recent))
    if count <= 0:
        return []
    return sorted(entry[1] for entry in itertools.islice(reversed(stats.recent), count))


def _latency_percentiles(durations: list[int]) -> dict[str, float] | None:
    """p50/p95/p99 of `durations` (sorted), in ms; None without any."""
    if not durations:
        return None
    return {f"p{p}": round(_nearest_rank(durations, p) / 1e6, 3) for p in PERCENTILES}


def _nearest_rank(ordered: list[int], percentile: int) -> int:
    rank = max(1, math.ceil(percentile / 100 * len(ordered)))
    return ordered[rank - 1]


def _mean_ms(total_ns: int, count: int) -> float | None:
    return round(total_ns / count / 1e6, 3) if count > 0 else None
