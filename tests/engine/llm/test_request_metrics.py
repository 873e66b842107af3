"""The LLM request metrics' bookkeeping: vLLM's buckets, a value on a bound, readings added across instances, the
end-to-end latency counting completed requests only."""

from __future__ import annotations

import pytest

from engine.llm.metrics import (
    ITL_BUCKETS_S,
    REQUEST_BUCKETS_S,
    TTFT_BUCKETS_S,
    Histogram,
    LLMMetrics,
    RequestTimings,
)


def test_it_buckets_like_vllm():
    assert (TTFT_BUCKETS_S[0], TTFT_BUCKETS_S[-1], len(TTFT_BUCKETS_S)) == (0.001, 2560.0, 22)
    assert (ITL_BUCKETS_S[0], ITL_BUCKETS_S[-1], len(ITL_BUCKETS_S)) == (0.01, 80.0, 19)
    assert (REQUEST_BUCKETS_S[0], REQUEST_BUCKETS_S[-1], len(REQUEST_BUCKETS_S)) == (0.3, 7680.0, 21)
    for bounds in (TTFT_BUCKETS_S, ITL_BUCKETS_S, REQUEST_BUCKETS_S):
        assert list(bounds) == sorted(set(bounds))


def test_it_counts_a_value_on_a_bound_in_that_bounds_bucket():
    histogram = Histogram((0.1, 1.0))
    for value in (0.1, 0.5, 1.0, 1.5, 0.0):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1]
    assert histogram.cumulative() == [2, 4, 5]
    assert histogram.count == 5 and histogram.sum == pytest.approx(3.1)
    assert histogram.mean == pytest.approx(0.62)
    assert Histogram((1.0,)).mean is None


def test_it_refuses_to_add_histograms_of_other_bounds():
    with pytest.raises(ValueError, match="different bounds"):
        Histogram((1.0,)).add(Histogram((2.0,)))


def test_it_adds_instances_readings_into_one():
    first = LLMMetrics(running=2, waiting=1, kv_blocks=100, kv_blocks_used=50, prefix_queries=10, prefix_hits=4)
    first.finished = {"stop": 1}
    first.ttft.observe(0.2)
    second = LLMMetrics(running=1, kv_blocks=300, kv_blocks_used=30, prefix_queries=10, prefix_hits=1)
    second.finished = {"stop": 2, "abort": 1}
    second.ttft.observe(0.4)
    total = LLMMetrics.combined([first, second])
    assert (total.running, total.waiting) == (3, 1)
    assert total.kv_usage == pytest.approx(80 / 400)  # blocks held over blocks, not a mean of shares
    assert total.prefix_hit_rate == pytest.approx(5 / 20)
    assert total.finished == {"stop": 3, "abort": 1}
    assert total.ttft.count == 2 and total.ttft.sum == pytest.approx(0.6)
    assert first.ttft.count == 1  # the parts are left as they were
    assert LLMMetrics().prefix_hit_rate is None and LLMMetrics().kv_usage == 0.0


def test_it_counts_completed_requests_in_the_end_to_end_latency_and_every_end_by_reason():
    timings = RequestTimings()
    timings.scheduled(0.25)
    timings.token(True, 0.5)
    timings.token(False, 0.05)
    timings.finished("length", 2.0)
    timings.finished("stop", 1.0)
    timings.finished("abort", 9.0)
    reading = timings.into(LLMMetrics(running=1))
    assert reading.running == 1
    assert reading.finished == {"length": 1, "stop": 1, "abort": 1}
    assert (reading.e2e.count, reading.e2e.sum) == (2, 3.0)
    assert (reading.queue_time.count, reading.ttft.sum, reading.itl.sum) == (1, 0.5, 0.05)
    timings.token(False, 0.05)
    assert reading.itl.count == 1  # a reading is a copy: later tokens do not change it
