"""The last hour of every model, a minute at a time: requests, failures and request latency per minute.

The sampler hands each interval's numbers to `MinuteHistory.add`; a minute of the wall clock collects them and closes
when a sample falls in a later minute. Latency goes into a histogram of buckets 2^(1/8) apart (each about 9% wide),
so a minute's p99, or the hour's, is read from the merged counts of every request it saw rather than guessed from
per-second percentiles (it is the bucket's upper edge, never above the slowest request seen).

The server's requests are those clients sent through a front end: the calls made inside the server (an ensemble's
steps, BLS, shadow copies, warm-up) count for their models only, so a client's one request to an ensemble is one
request. The server's p99 is the slowest model's.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

HOUR_MINUTES = 60
BUCKETS_PER_DOUBLING = 8

Figures = dict[str, Any]


class LatencyHistogram:
    """Request durations counted in logarithmic buckets; mergeable, and small whatever the request rate."""

    __slots__ = ("counts", "total", "largest_ns")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.largest_ns = 0

    def add(self, durations_ns: Iterable[int]) -> None:
        for duration in durations_ns:
            bucket = _bucket(duration)
            self.counts[bucket] = self.counts.get(bucket, 0) + 1
            self.total += 1
            self.largest_ns = max(self.largest_ns, duration)

    def merge(self, other: LatencyHistogram) -> None:
        for bucket, count in other.counts.items():
            self.counts[bucket] = self.counts.get(bucket, 0) + count
        self.total += other.total
        self.largest_ns = max(self.largest_ns, other.largest_ns)

    def percentile_ms(self, percentile: float) -> float | None:
        """The `percentile`th request duration in ms (nearest rank, to the bucket's upper edge); None when empty."""
        if self.total == 0:
            return None
        rank = max(1, math.ceil(percentile / 100 * self.total))
        seen = 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return round(min(_upper_edge_ns(bucket), self.largest_ns) / 1e6, 3)
        return round(self.largest_ns / 1e6, 3)  # pragma: no cover - the counts add up to total


def _bucket(duration_ns: int) -> int:
    return int(math.log2(duration_ns) * BUCKETS_PER_DOUBLING) if duration_ns > 1 else 0


def _upper_edge_ns(bucket: int) -> float:
    return 2 ** ((bucket + 1) / BUCKETS_PER_DOUBLING)


@dataclass(slots=True, frozen=True)
class Interval:
    """One model version's requests over one sampler interval."""

    name: str
    successes: int
    failures: int
    client_successes: int  # of those, the ones clients sent through a front end
    client_failures: int
    durations_ns: Sequence[int] = ()  # of the interval's successes

    @property
    def requests(self) -> int:
        return self.successes + self.failures

    @property
    def client_requests(self) -> int:
        return self.client_successes + self.client_failures


@dataclass(slots=True)
class _Tally:
    """One model's requests over a minute (or the hour)."""

    requests: int = 0
    failures: int = 0
    client_requests: int = 0
    client_failures: int = 0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)

    @classmethod
    def of(cls, interval: Interval) -> _Tally:
        tally = cls(interval.requests, interval.failures, interval.client_requests, interval.client_failures)
        tally.latency.add(interval.durations_ns)
        return tally

    def merge(self, other: _Tally) -> None:
        self.requests += other.requests
        self.failures += other.failures
        self.client_requests += other.client_requests
        self.client_failures += other.client_failures
        self.latency.merge(other.latency)


@dataclass(slots=True)
class _Minute:
    index: int  # minutes since the epoch
    seconds: float = 0.0  # sampled time it covers (less than 60 for the first, or after a pause)
    models: dict[str, _Tally] = field(default_factory=dict)

    def add(self, seconds: float, intervals: Iterable[Interval]) -> None:
        self.seconds += seconds
        for interval in intervals:
            self.models.setdefault(interval.name, _Tally()).merge(_Tally.of(interval))

    def to_dict(self) -> Figures:
        return {"t": self.index * 60_000, **_figures(self.models, self.seconds)}


def server_figures(requests: int, failures: int, seconds: float, p99_ms: float | None) -> Figures:
    """requests/s, failures/s, error rate (None without requests) and p99 of the server over `seconds`."""
    return {
        "requests_per_s": _rate(requests, seconds),
        "failures_per_s": _rate(failures, seconds),
        "error_rate": round(failures / requests, 4) if requests > 0 else None,
        "p99_ms": p99_ms,
    }


def _figures(models: dict[str, _Tally], seconds: float) -> Figures:
    per_model = {
        name: {
            "requests_per_s": _rate(tally.requests, seconds),
            "error_rate": round(tally.failures / tally.requests, 4) if tally.requests > 0 else None,
            "p99_ms": tally.latency.percentile_ms(99),
        }
        for name, tally in sorted(models.items())
    }
    p99s = [figures["p99_ms"] for figures in per_model.values() if figures["p99_ms"] is not None]
    requests = sum(tally.client_requests for tally in models.values())
    failures = sum(tally.client_failures for tally in models.values())
    return {
        "seconds": round(seconds, 3),
        **server_figures(requests, failures, seconds, max(p99s, default=None)),
        "models": per_model,
    }


def _rate(count: int, seconds: float) -> float:
    return round(count / seconds, 3) if seconds > 0 else 0.0


class MinuteHistory:
    """The last `minutes` minutes of every model; `add` returns a minute's figures when it closes."""

    def __init__(self, minutes: int = HOUR_MINUTES) -> None:
        if minutes < 1:
            raise ValueError(f"the history must keep at least one minute, got {minutes}")
        self.kept = minutes
        self._closed: deque[_Minute] = deque()
        self._open: _Minute | None = None

    def add(self, wall_s: float, seconds: float, intervals: Iterable[Interval]) -> Figures | None:
        """Count one sample's `intervals` (covering `seconds`, ending at `wall_s`) in the minute of `wall_s`."""
        index = math.floor(wall_s / 60)
        closed = None
        if self._open is not None and index > self._open.index:
            closed = self._open
            self._closed.append(closed)
            self._open = None
        if self._open is None:
            self._open = _Minute(index)
        self._open.add(seconds, intervals)
        while self._closed and self._closed[0].index <= index - self.kept:
            self._closed.popleft()
        return closed.to_dict() if closed is not None else None

    def minutes(self) -> list[Figures]:
        """Every closed minute kept, oldest first."""
        return [minute.to_dict() for minute in self._closed]

    def summary(self) -> Figures:
        """The figures of every minute kept, the open one included: the last hour in one set of numbers."""
        models: dict[str, _Tally] = {}
        seconds = 0.0
        for minute in [*self._closed, *([self._open] if self._open is not None else [])]:
            seconds += minute.seconds
            for name, tally in minute.models.items():
                models.setdefault(name, _Tally()).merge(tally)
        return _figures(models, seconds)
