"""A language model's numbers in /metrics and in the live snapshot, from stand-in instances (no model): its families
with vLLM's meanings, labelled like Triton's, its instances added up; the snapshot's `llm` entry over an interval of a
hand clock; several engines' entries merged and checked."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.llm.metrics import LLMMetrics
from engine.monitoring.llm import llm_families
from engine.monitoring.merge import check_snapshot, merge_entries
from engine.monitoring.prometheus import _model_labels, render_metrics
from engine.monitoring.sampler import MetricsSampler
from tests.engine.monitoring.stand_ins import (
    FIXED_DEVICES,
    FakeClock,
    LLMBackend,
    LLMInstance,
    Served,
    ServedVersions,
    llm,
)


def reading(**numbers: int) -> LLMMetrics:
    values = LLMMetrics(**numbers)
    values.finished = {"stop": 2, "length": 1}
    for seconds in (0.03, 0.3):
        values.ttft.observe(seconds)
    values.itl.observe(0.02)
    values.e2e.observe(1.2)
    values.queue_time.observe(0.01)
    return values


class Families:
    def __init__(self, served: list) -> None:
        self.served = served

    def collect(self):
        return llm_families(self.served, _model_labels)


def scrape(*served) -> dict:
    text = render_metrics(Families(list(served))).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_it_writes_the_llm_families_with_vllms_meanings_adding_up_a_models_instances():
    first = reading(running=2, waiting=1, kv_blocks=100, kv_blocks_used=25, prefix_queries=40, prefix_hits=16)
    second = reading(running=1, kv_blocks=100, kv_blocks_used=75, generation_tokens=7, prompt_tokens=9, preemptions=1)
    families = scrape(llm("tiny", first, second), Served("onnx_model", 1))
    labels = {"model": "tiny", "version": "1"}

    def value(name: str, **extra: str) -> float:
        (sample,) = [s for s in families[name].samples if s.labels == labels | extra]
        return sample.value

    assert families["infera_llm_requests_running"].type == "gauge"
    assert value("infera_llm_requests_running") == 3 and value("infera_llm_requests_waiting") == 1
    assert value("infera_llm_kv_cache_usage_ratio") == 0.5
    # counters keep their declared names (prometheus_client's parser names the family without _total)
    assert families["infera_llm_prefix_cache_queries"].type == "counter"
    assert value("infera_llm_prefix_cache_queries") == 40 and value("infera_llm_prefix_cache_hits") == 16
    assert value("infera_llm_preemptions") == 1
    assert value("infera_llm_prompt_tokens") == 9 and value("infera_llm_generation_tokens") == 7
    assert value("infera_llm_requests_finished", finish_reason="stop") == 4
    ttft = families["infera_llm_time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    buckets = {s.labels["le"]: s.value for s in ttft.samples if s.name.endswith("_bucket")}
    assert (buckets["0.001"], buckets["0.04"], buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (0, 2, 2, 4, 4)
    assert len(buckets) == 23  # vLLM's 22 bounds and +Inf
    count = [s for s in ttft.samples if s.name.endswith("_count")][0]
    total = [s for s in ttft.samples if s.name.endswith("_sum")][0]
    assert count.value == 4 and total.value == pytest.approx(0.66)
    for name in ("inter_token_latency_seconds", "e2e_request_latency_seconds", "queue_time_seconds"):
        assert families["infera_llm_" + name].type == "histogram"
    assert all(s.labels["model"] == "tiny" for f in families.values() for s in f.samples)  # onnx_model has none


def test_no_llm_served_means_no_llm_families():
    assert scrape(Served("onnx_model", 1)) == {}


def test_the_snapshot_carries_gauges_now_and_rates_and_mean_times_over_the_interval(clock: FakeClock):
    backend = LLMBackend(LLMMetrics(kv_blocks=10))
    served = llm("tiny")
    served.instances = [LLMInstance(backend)]
    sampler = MetricsSampler(ServedVersions(served, Served("onnx_model", 1)), clock=clock, wall_clock=lambda: 0.0)
    sampler.sample(devices=FIXED_DEVICES)
    clock.advance(2.0)
    backend.reading = reading(running=1, waiting=2, kv_blocks=10, kv_blocks_used=4, prefix_queries=8, prefix_hits=2)
    backend.reading.generation_tokens = 30
    other, tiny = sampler.sample(devices=FIXED_DEVICES)["models"]  # by name
    assert other["llm"] is None
    entry = tiny["llm"]
    assert (entry["running"], entry["waiting"], entry["kv_cache_usage"]) == (1, 2, 0.4)
    assert (entry["prefix_cache_hit_rate"], entry["prefix_cache_queries"], entry["prefix_cache_hits"]) == (0.25, 8, 2)
    assert entry["generation_tokens_per_s"] == 15.0 and entry["finished_per_s"] == 1.5
    assert entry["ttft_ms"] == pytest.approx(165.0) and entry["itl_ms"] == pytest.approx(20.0)
    assert entry["e2e_ms"] == pytest.approx(1200.0) and entry["queue_ms"] == pytest.approx(10.0)
    clock.advance(1.0)
    entry = sampler.sample(devices=FIXED_DEVICES)["models"][1]["llm"]
    assert entry["ttft_ms"] is None and entry["generation_tokens_per_s"] == 0.0  # nothing new in this interval
    assert entry["running"] == 1 and entry["prefix_cache_hit_rate"] == 0.25  # gauges and the rate since load stay
    snapshot = {"t": 1, "interval": 1.0, "models": [tiny], "server": {"requests_per_s": 0, "failures_per_s": 0}}
    assert check_snapshot({**snapshot, "devices": {}}) is not None


def test_engines_entries_merge_into_the_clusters():
    def entry(**llm_numbers) -> dict:
        return {"name": "tiny", "version": 1, "success_per_s": 0.0, "llm": llm_numbers}

    merged = merge_entries(
        [
            entry(running=1, waiting=0, kv_cache_usage=0.5, kv_cache_blocks=100, prefix_cache_queries=10,
                  prefix_cache_hits=5, generation_tokens_per_s=30.0, itl_ms=10.0, finished_per_s=1.0, ttft_ms=100.0),
            entry(running=2, waiting=3, kv_cache_usage=0.1, kv_cache_blocks=300, prefix_cache_queries=30,
                  prefix_cache_hits=5, generation_tokens_per_s=10.0, itl_ms=30.0, finished_per_s=0.0, ttft_ms=None),
        ]
    )["llm"]  # fmt: skip
    assert (merged["running"], merged["waiting"], merged["kv_cache_blocks"]) == (3, 3, 400)
    assert merged["kv_cache_usage"] == pytest.approx((50 + 30) / 400)
    assert merged["prefix_cache_hit_rate"] == pytest.approx(10 / 40)
    assert merged["itl_ms"] == pytest.approx(15.0) and merged["ttft_ms"] == 100.0


def test_a_snapshot_with_a_malformed_llm_entry_is_refused():
    model = {"name": "tiny", "version": 1, "success_per_s": 0.0, "llm": {"running": "three"}}
    snapshot = {"t": 1, "devices": {}, "server": {"requests_per_s": 0, "failures_per_s": 0}, "models": [model]}
    with pytest.raises(ValueError, match=r"\.llm"):
        check_snapshot(snapshot)
