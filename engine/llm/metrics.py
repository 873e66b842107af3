"""An LLM engine's request metrics, with vLLM's meanings: what the engine loop records as requests pass, and a
reading of it with the scheduler's gauges and counters (`LLMMetrics`), which /metrics and the live snapshot show.

Times are in seconds of the engine's clock (an explicit one in tests): queue time from arrival (`submit`) to the
first step that computes any of the request; time to first token from arrival to the step that sampled it;
inter-token latency between two tokens of one sequence; end-to-end latency from arrival to the last token, for
requests that completed ("stop" or "length": a cancelled one is counted in `finished` only). Histograms take vLLM's
bucket bounds, so dashboards built for vLLM read them alike. The loop records on its own thread while scrapes read
from the event loop: one lock keeps a histogram's buckets, count and sum consistent with each other.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

# vLLM's bounds (seconds): first tokens from a millisecond, gaps between tokens from 10 ms, whole requests from 0.3 s
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
COMPLETED = ("stop", "length")  # finish reasons whose requests count in the end-to-end latency


@dataclass(slots=True)
class Histogram:
    """Observations counted per bucket (`counts[i]`: at most `bounds[i]`, the last one past every bound) and summed."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    @property
    def count(self) -> int:
        return sum(self.counts)

    @property
    def mean(self) -> float | None:
        count = self.count
        return self.sum / count if count else None

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # a value on a bound is in that bound's bucket
        self.sum += value

    def cumulative(self) -> list[int]:
        """Prometheus's `_bucket` values: observations at most each bound, then all of them (`+Inf`)."""
        total, running = [], 0
        for count in self.counts:
            running += count
            total.append(running)
        return total

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.sum)

    def add(self, other: Histogram) -> None:
        if other.bounds != self.bounds:
            raise ValueError("histograms with different bounds do not add up")
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.sum += other.sum


@dataclass(slots=True)
class LLMMetrics:
    """One engine's numbers at one moment (or several engines' added up, `combined`)."""

    running: int = 0  # sequences in the running batch
    waiting: int = 0  # sequences waiting to be admitted (new or preempted)
    kv_blocks: int = 0  # the KV cache's blocks
    kv_blocks_used: int = 0  # of those, held by sequences
    prefix_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_hits: int = 0  # of those, found cached
    preemptions: int = 0
    prompt_tokens: int = 0  # prompts of the requests that got their first token
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=dict)  # requests by finish reason (stop, length, abort)
    queue_time: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS_S))
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS_S))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_BUCKETS_S))

    @property
    def kv_usage(self) -> float:
        """The share of the KV cache's blocks held by sequences (0.0 to 1.0)."""
        return self.kv_blocks_used / self.kv_blocks if self.kv_blocks else 0.0

    @property
    def prefix_hit_rate(self) -> float | None:
        """Prompt tokens found in the prefix cache over those looked up; None before any lookup."""
        return self.prefix_hits / self.prefix_queries if self.prefix_queries else None

    @classmethod
    def combined(cls, readings: Iterable[LLMMetrics]) -> LLMMetrics:
        """Several engines (a model's instances) as one: counts, gauges and histograms add up."""
        total = cls()
        for reading in readings:
            for name in _SUMMED:
                setattr(total, name, getattr(total, name) + getattr(reading, name))
            for reason, count in reading.finished.items():
                total.finished[reason] = total.finished.get(reason, 0) + count
            for name in _HISTOGRAMS:
                getattr(total, name).add(getattr(reading, name))
        return total


_SUMMED = (
    "running",
    "waiting",
    "kv_blocks",
    "kv_blocks_used",
    "prefix_queries",
    "prefix_hits",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
)
_HISTOGRAMS = ("queue_time", "ttft", "itl", "e2e")


class RequestTimings:
    """The engine loop's record of its requests' times and ends; read from any thread (`into`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = LLMMetrics()

    def scheduled(self, queue_s: float) -> None:
        """A request's first step: it waited `queue_s` since its arrival."""
        with self._lock:
            self._values.queue_time.observe(queue_s)

    def token(self, first: bool, since_s: float) -> None:
        """A sampled token: the first (`since_s` from arrival) or a later one (`since_s` from the previous token)."""
        with self._lock:
            (self._values.ttft if first else self._values.itl).observe(since_s)

    def finished(self, reason: str, since_arrival_s: float) -> None:
        """A request ended with `reason`; a completed one (stop, length) counts in the end-to-end latency."""
        with self._lock:
            finished = self._values.finished
            finished[reason] = finished.get(reason, 0) + 1
            if reason in COMPLETED:
                self._values.e2e.observe(since_arrival_s)

    def into(self, reading: LLMMetrics) -> LLMMetrics:
        """`reading` (the scheduler's numbers) with a copy of these times and ends."""
        with self._lock:
            reading.finished = dict(self._values.finished)
            for name in _HISTOGRAMS:
                setattr(reading, name, getattr(self._values, name).copy())
        return reading
