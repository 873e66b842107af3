"""Per model-version statistics with Triton's statistics-extension fields, recorded on the event loop."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.serving.streams import StreamStats

# recent request latencies kept for percentiles; the sampler reads a one-second window of them
LATENCY_WINDOW = 8192
# the front ends clients reach; every other protocol a request is counted under names a call made inside the server
# (an ensemble's steps, BLS, shadow copies, warm-up, analyses)
CLIENT_PROTOCOLS = frozenset({"http", "grpc"})


@dataclass(slots=True)
class Duration:
    """A count and a total in nanoseconds (Triton's StatisticDuration)."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchStats:
    """Compute durations of executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ComputeTimes:
    """How long each phase of one batch took on its instance, in nanoseconds."""

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0


class ModelStats:
    """Counters of one model version: the single source for the stats API, Prometheus and live charts."""

    def __init__(self, name: str, version: int) -> None:
        self.name = name
        self.version = version
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.pending = 0
        # a sequence model's live sequences, backlog and slots (engine.schedulers.sequence_dispatcher), None for others
        self.sequences: dict[str, int] | None = None
        self.batches: dict[int, BatchStats] = {}
        # successful and failed requests by the front end they came through ("http", "grpc")
        self.protocols: dict[str, list[int]] = {}
        # (finish time ns, request duration ns, queue ns) of recent successful requests
        self.recent: deque[tuple[int, int, int]] = deque(maxlen=LATENCY_WINDOW)
        # a decoupled model's streams (time to first response, responses, in flight); None for other models
        self.streams: StreamStats | None = None

    def record_batch(self, batch_size: int, times: ComputeTimes, request_count: int) -> None:
        """One execution of `request_count` requests holding `batch_size` inferences."""
        self.execution_count += 1
        self.inference_count += batch_size
        per_batch = self.batches.get(batch_size)
        if per_batch is None:
            per_batch = self.batches[batch_size] = BatchStats()
        per_batch.compute_input.add(times.input_ns)
        per_batch.compute_infer.add(times.infer_ns)
        per_batch.compute_output.add(times.output_ns)
        # per-request compute stats: each request of the batch spent the batch's compute time (as Triton counts)
        self.compute_input.add(times.input_ns * request_count, request_count)
        self.compute_infer.add(times.infer_ns * request_count, request_count)
        self.compute_output.add(times.output_ns * request_count, request_count)

    def record_success(self, request_ns: int, queue_ns: int, now_ns: int | None = None, protocol: str = "http") -> None:
        now_ns = now_ns if now_ns is not None else time.monotonic_ns()
        self._count(protocol, 0)
        self.success.add(request_ns)
        self.queue.add(queue_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000
        self.recent.append((now_ns, request_ns, queue_ns))

    def record_failure(self, request_ns: int, protocol: str = "http") -> None:
        self._count(protocol, 1)
        self.fail.add(request_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def _count(self, protocol: str, which: int) -> None:
        counts = self.protocols.get(protocol)
        if counts is None:
            counts = self.protocols[protocol] = [0, 0]
        counts[which] += 1

    def to_dict(self) -> dict:
        """The `model_stats` entry Triton's statistics extension returns (a decoupled model's adds its streams)."""
        entry = {
            "name": self.name,
            "version": str(self.version),
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_dict(),
                "fail": self.fail.to_dict(),
                "queue": self.queue.to_dict(),
                "compute_input": self.compute_input.to_dict(),
                "compute_infer": self.compute_infer.to_dict(),
                "compute_output": self.compute_output.to_dict(),
                "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
            "batch_stats": [
                {
                    "batch_size": size,
                    "compute_input": b.compute_input.to_dict(),
                    "compute_infer": b.compute_infer.to_dict(),
                    "compute_output": b.compute_output.to_dict(),
                }
                for size, b in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
        if self.streams is not None:
            entry["stream_stats"] = self.streams.to_dict()
        return entry
