"""The hour of per-minute figures: minutes closing, rates over the time sampled, p99 from merged histograms."""

from __future__ import annotations

import pytest

from engine.monitoring.history import Interval, LatencyHistogram, MinuteHistory


def requests(name: str, ok: int, failed: int = 0, latency_ms: float = 2.0, from_clients: bool = True) -> Interval:
    """`ok` successes and `failed` failures of `name`, sent by clients or by a call inside the server."""
    return Interval(
        name=name,
        successes=ok,
        failures=failed,
        client_successes=ok if from_clients else 0,
        client_failures=failed if from_clients else 0,
        durations_ns=[int(latency_ms * 1e6)] * ok,
    )


def test_it_reads_percentiles_within_one_bucket_of_the_truth():
    histogram = LatencyHistogram()
    histogram.add(int(ms * 1e6) for ms in range(1, 101))
    p99 = histogram.percentile_ms(99)
    assert 99.0 <= p99 <= 99.0 * 2 ** (1 / 8)
    assert histogram.percentile_ms(100) == 100.0  # never above the slowest request
    assert LatencyHistogram().percentile_ms(99) is None


def test_it_closes_a_minute_when_a_sample_falls_in_the_next():
    history = MinuteHistory()
    for second in range(60, 120):
        assert history.add(second, 1.0, [requests("m", 6, 0)]) is None
    closed = history.add(120, 1.0, [requests("m", 6, 0)])
    assert closed["t"] == 60_000
    assert closed["seconds"] == 60.0
    assert closed["requests_per_s"] == 6.0
    assert closed["models"]["m"]["requests_per_s"] == 6.0
    assert history.minutes() == [closed]


def test_it_gives_rates_over_the_time_sampled_not_the_whole_minute():
    history = MinuteHistory()
    for second in range(90, 100):  # started in the middle of the minute
        history.add(second, 1.0, [requests("m", 3)])
    closed = history.add(120, 1.0, [])
    assert closed["seconds"] == 10.0
    assert closed["requests_per_s"] == 3.0


def test_it_computes_error_rate_and_the_slowest_models_p99():
    history = MinuteHistory()
    history.add(0, 1.0, [requests("fast", 90, 10, latency_ms=1.0), requests("slow", 100, 0, latency_ms=40.0)])
    closed = history.add(60, 1.0, [])
    assert closed["error_rate"] == pytest.approx(10 / 200)
    assert closed["models"]["fast"]["error_rate"] == pytest.approx(0.1)
    assert closed["p99_ms"] == closed["models"]["slow"]["p99_ms"] == 40.0
    assert closed["models"]["fast"]["p99_ms"] == 1.0


def test_it_counts_a_clients_request_to_an_ensemble_once():
    history = MinuteHistory()
    pipeline = [requests("pipeline", 10, 1), requests("step", 10, 1, from_clients=False)]
    history.add(0, 1.0, pipeline)
    closed = history.add(60, 1.0, [])
    assert closed["requests_per_s"] == 11.0
    assert closed["failures_per_s"] == 1.0
    assert closed["models"]["step"]["requests_per_s"] == 11.0


def test_it_keeps_one_hour_and_sums_it_up():
    history = MinuteHistory(minutes=60)
    for minute in range(90):
        history.add(minute * 60.0, 60.0, [requests("m", 60 * (minute + 1))])
    kept = history.minutes()
    assert len(kept) == 59  # and the open minute: an hour
    assert kept[0]["t"] == 30 * 60_000
    hour = history.summary()
    assert hour["seconds"] == 3600.0
    assert hour["requests_per_s"] == pytest.approx(sum(range(31, 91)) / 60)
    assert hour["error_rate"] == 0.0


def test_it_says_nothing_of_error_rate_or_latency_without_requests():
    history = MinuteHistory()
    history.add(0, 1.0, [requests("m", 0)])
    hour = history.summary()
    assert hour["error_rate"] is None
    assert hour["p99_ms"] is None
    assert hour["requests_per_s"] == 0.0


def test_it_refuses_to_keep_no_minute():
    with pytest.raises(ValueError, match="at least one minute"):
        MinuteHistory(minutes=0)
