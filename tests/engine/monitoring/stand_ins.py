"""Stand-ins for the monitoring tests: the server's list of served versions over real ModelStats, a hand clock."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.llm.metrics import LLMMetrics
from engine.monitoring.devices import CpuSample, DeviceSample
from engine.serving.model_status import ModelState
from engine.serving.stats import ComputeTimes, ModelStats


@dataclass
class Served:
    """What the sampler reads of a ServedVersion: name, version, state and its real ModelStats."""

    name: str
    version: int
    stats: ModelStats = field(init=False)
    state: ModelState = ModelState.READY

    def __post_init__(self) -> None:
        self.stats = ModelStats(self.name, self.version)


@dataclass
class LLMBackend:
    """What the monitoring reads of an `llm` instance's backend: its numbers, which the test sets."""

    reading: LLMMetrics = field(default_factory=LLMMetrics)

    def llm_metrics(self) -> LLMMetrics:
        return self.reading


@dataclass
class LLMInstance:
    backend: LLMBackend


@dataclass
class ServedLLM(Served):
    """A served `llm` version: its instances' backends answer `llm_metrics()`."""

    instances: list[LLMInstance] = field(default_factory=list)


def llm(name: str = "tiny", *readings: LLMMetrics) -> ServedLLM:
    """Version 1 of an LLM with one instance per reading."""
    served = ServedLLM(name, 1)
    served.instances = [LLMInstance(LLMBackend(reading)) for reading in readings]
    return served


class ServedVersions:
    """The one server method the sampler uses, over a list the test edits."""

    def __init__(self, *served: Served) -> None:
        self.served = list(served)

    def served_versions(self) -> list[Served]:
        return list(self.served)


class FakeClock:
    """A clock the test moves by hand (seconds, like time.monotonic)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


FIXED_DEVICES = DeviceSample(
    cpu=CpuSample(
        utilization=0.25, memory_used_bytes=4 << 30, memory_total_bytes=16 << 30, process_memory_bytes=1 << 28
    )
)


def run_batch(stats: ModelStats, latencies_ms: list[float], queue_ms: float = 1.0, compute_ms: float = 2.0) -> None:
    """Record one execution holding one request per latency, each with its own request duration."""
    times = ComputeTimes(input_ns=0, infer_ns=int(compute_ms * 1e6), output_ns=0)
    stats.record_batch(len(latencies_ms), times, len(latencies_ms))
    for latency in latencies_ms:
        stats.record_success(int(latency * 1e6), int(queue_ms * 1e6))
