"""Language models' numbers (engine/llm/metrics.py, read from each instance of an `llm` model) in /metrics and in
the live snapshot.

/metrics: per model version, labelled `model` and `version` like Triton's families, with vLLM's meanings under
Infera's names: gauges of running and waiting sequences and of the KV cache's usage (0 to 1); counters of prefix-cache
queries and hits (prompt tokens), preemptions, prompt and generation tokens, finished requests by reason; histograms
(vLLM's buckets, seconds) of queue time, time to first token, inter-token and end-to-end latency. A model's instances
add up. The families appear only while an LLM is served.

The snapshot: each LLM version's entry carries `llm`: the gauges now, the prefix cache's hit rate since its load,
token rates and mean times over the interval (engine/monitoring/merge.py adds several engines' up).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from engine.llm.metrics import Histogram, LLMMetrics

PREFIX = "infera_llm_"

_GAUGES = (
    ("requests_running", "Sequences in the running batch of an LLM (vLLM's num_requests_running).", "running"),
    ("requests_waiting", "Sequences waiting to be admitted, new or preempted (num_requests_waiting).", "waiting"),
    ("kv_cache_usage_ratio", "The share of the KV cache's blocks held by sequences, 0 to 1.", "kv_usage"),
)
_COUNTERS = (
    ("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", "prefix_queries"),
    ("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", "prefix_hits"),
    ("preemptions_total", "Sequences preempted (their blocks freed, recomputed later).", "preemptions"),
    ("prompt_tokens_total", "Prompt tokens of the requests that got their first token.", "prompt_tokens"),
    ("generation_tokens_total", "Tokens generated.", "generation_tokens"),
)
_HISTOGRAMS = (
    ("queue_time_seconds", "From a request's arrival to the first step that computes it.", "queue_time"),
    ("time_to_first_token_seconds", "From a request's arrival to its first token.", "ttft"),
    ("inter_token_latency_seconds", "Between two consecutive tokens of one sequence.", "itl"),
    ("e2e_request_latency_seconds", "From a request's arrival to its last token (stop or length).", "e2e"),
)
_SNAPSHOT_TIMES = (("queue_ms", "queue_time"), ("ttft_ms", "ttft"), ("itl_ms", "itl"), ("e2e_ms", "e2e"))


def llm_metrics(served: Any) -> LLMMetrics | None:
    """A served version's LLM numbers, its instances added up; None for a model of another backend."""
    readings = []
    for instance in getattr(served, "instances", ()):
        read = getattr(instance.backend, "llm_metrics", None)
        reading = read() if read is not None else None
        if reading is not None:
            readings.append(reading)
    return LLMMetrics.combined(readings) if readings else None


def llm_families(served: Iterable[Any], labels: Callable[[Any], dict[str, str]]) -> Iterable[Metric]:
    """The LLM families of the served versions that are LLMs (none when no LLM is served), each version's samples
    labelled by `labels(version)`."""
    versions = [(version, reading) for version in served if (reading := llm_metrics(version)) is not None]
    if not versions:
        return
    for kind, table in (("gauge", _GAUGES), ("counter", _COUNTERS)):
        for suffix, documentation, field in table:
            family = Metric(PREFIX + suffix, documentation, kind)
            for version, reading in versions:
                family.add_sample(family.name, labels(version), getattr(reading, field))
            yield family
    finished = Metric(
        PREFIX + "requests_finished_total", "Requests ended, by finish reason (stop, length, abort).", "counter"
    )
    for version, reading in versions:
        for reason, count in sorted(reading.finished.items()):
            finished.add_sample(finished.name, labels(version) | {"finish_reason": reason}, count)
    yield finished
    for suffix, documentation, field in _HISTOGRAMS:
        family = Metric(PREFIX + suffix, documentation, "histogram")
        for version, reading in versions:
            _add_histogram(family, labels(version), getattr(reading, field))
        yield family


def _add_histogram(family: Metric, labels: dict[str, str], histogram: Histogram) -> None:
    cumulative = histogram.cumulative()
    for bound, count in zip(histogram.bounds, cumulative, strict=False):
        family.add_sample(f"{family.name}_bucket", labels | {"le": floatToGoString(bound)}, count)
    family.add_sample(f"{family.name}_bucket", labels | {"le": "+Inf"}, cumulative[-1])
    family.add_sample(f"{family.name}_count", labels, cumulative[-1])
    family.add_sample(f"{family.name}_sum", labels, histogram.sum)


def llm_entry(now: LLMMetrics | None, before: LLMMetrics | None, elapsed: float) -> dict[str, Any] | None:
    """A version's `llm` in the snapshot: gauges now, cumulative counts, rates and mean times since `before`."""
    if now is None:
        return None
    before = before if before is not None else LLMMetrics()

    def rate(field: str) -> float:
        return round((getattr(now, field) - getattr(before, field)) / elapsed, 3) if elapsed > 0 else 0.0

    hit_rate = now.prefix_hit_rate
    entry: dict[str, Any] = {
        "running": now.running,
        "waiting": now.waiting,
        "kv_cache_usage": round(now.kv_usage, 4),
        "kv_cache_blocks": now.kv_blocks,
        "prefix_cache_hit_rate": round(hit_rate, 4) if hit_rate is not None else None,
        "prefix_cache_queries": now.prefix_queries,
        "prefix_cache_hits": now.prefix_hits,
        "preemptions": now.preemptions,
        "prompt_tokens_per_s": rate("prompt_tokens"),
        "generation_tokens_per_s": rate("generation_tokens"),
        "finished_per_s": (
            round((sum(now.finished.values()) - sum(before.finished.values())) / elapsed, 3) if elapsed > 0 else 0.0
        ),
    }
    for key, field in _SNAPSHOT_TIMES:
        current, previous = getattr(now, field), getattr(before, field)
        count = current.count - previous.count
        entry[key] = round((current.sum - previous.sum) / count * 1000, 3) if count > 0 else None
    return entry
