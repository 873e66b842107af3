"""Several engines' snapshots and figures combined into the cluster's."""

from __future__ import annotations

import re

import pytest

from engine.monitoring.merge import check_snapshot, merge_entries, merge_figures, merge_snapshots


def entry(name: str = "simple", version: int = 1, **numbers) -> dict:
    base = {
        "name": name,
        "version": version,
        "success_count": 100,
        "failure_count": 1,
        "success_per_s": 10.0,
        "failure_per_s": 0.0,
        "inferences_per_s": 10.0,
        "executions_per_s": 5.0,
        "latency_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0},
        "mean_latency_ms": 1.0,
        "queue_ms": 0.5,
        "compute_ms": 0.5,
        "batch_sizes": {"2": 5},
        "pending": 1,
        "sequences": None,
        "protocols": {"http": 10.0},
        "streams": None,
        "state": "READY",
    }
    return base | numbers


def snapshot(t: int, *models: dict, requests: float = 10.0, failures: float = 0.0, p99: float | None = 3.0) -> dict:
    server = {"requests_per_s": requests, "failures_per_s": failures, "error_rate": None, "p99_ms": p99}
    return {"t": t, "interval": 1.0, "models": list(models), "server": server, "devices": {"t": t}}


def test_it_adds_up_rates_counts_and_queues_and_weights_means_by_successes():
    merged = merge_entries(
        [
            entry(success_per_s=30.0, success_count=300, pending=2, mean_latency_ms=1.0, queue_ms=0.2),
            entry(success_per_s=10.0, success_count=100, pending=3, mean_latency_ms=5.0, queue_ms=None),
        ]
    )
    assert merged["success_per_s"] == 40.0 and merged["success_count"] == 400 and merged["pending"] == 5
    assert merged["mean_latency_ms"] == 2.0  # (30 * 1 + 10 * 5) / 40
    assert merged["queue_ms"] == 0.2  # only one engine measured a queue
    assert merged["batch_sizes"] == {"2": 10} and merged["protocols"] == {"http": 20.0}


def test_it_takes_the_slowest_engines_percentiles():
    fast = entry(latency_ms={"p50": 1.0, "p95": 2.0, "p99": 9.0})
    slow = entry(latency_ms={"p50": 4.0, "p95": 5.0, "p99": 6.0})
    idle = entry(latency_ms=None, success_per_s=0.0)
    assert merge_entries([fast, slow, idle])["latency_ms"] == {"p50": 4.0, "p95": 5.0, "p99": 9.0}
    assert merge_entries([idle, idle])["latency_ms"] is None


def test_it_adds_up_sequences_and_streams():
    sequences = {"live": 2, "backlog": 1, "slots_used": 2, "slots": 4}
    streams = {"in_flight": 2, "responses_per_s": 30.0, "first_response_ms": 10.0, "between_responses_ms": 2.0}
    other = {"in_flight": 1, "responses_per_s": 10.0, "first_response_ms": 30.0, "between_responses_ms": None}
    merged = merge_entries([entry(sequences=sequences, streams=streams), entry(sequences=sequences, streams=other)])
    assert merged["sequences"] == {"live": 4, "backlog": 2, "slots_used": 4, "slots": 8}
    assert merged["streams"] == {
        "in_flight": 3,
        "responses_per_s": 40.0,
        "first_response_ms": 15.0,
        "between_responses_ms": 2.0,
    }


def test_it_merges_snapshots_by_model_version_and_keeps_the_first_engines_time_and_devices():
    here = snapshot(2000, entry("a"), entry("b", 2), requests=20.0, failures=1.0, p99=3.0)
    there = snapshot(1500, entry("a"), entry("c"), requests=10.0, failures=2.0, p99=7.0)
    there["minute"] = {"t": 0}
    merged = merge_snapshots([here, there])
    assert [(m["name"], m["version"]) for m in merged["models"]] == [("a", 1), ("b", 2), ("c", 1)]
    assert merged["models"][0]["success_count"] == 200
    assert merged["server"] == {"requests_per_s": 30.0, "failures_per_s": 3.0, "error_rate": 0.1, "p99_ms": 7.0}
    assert merged["t"] == 2000 and merged["devices"] == {"t": 2000}
    assert "minute" not in merged
    assert merge_snapshots([here]) is here
    with pytest.raises(ValueError):
        merge_snapshots([])


def test_it_merges_minutes_and_hours():
    one = {
        "t": 60_000,
        "seconds": 60.0,
        "requests_per_s": 30.0,
        "failures_per_s": 3.0,
        "error_rate": 0.1,
        "p99_ms": 4.0,
        "models": {"a": {"requests_per_s": 30.0, "error_rate": 0.1, "p99_ms": 4.0}},
    }
    two = {
        "t": 60_000,
        "seconds": 59.0,
        "requests_per_s": 10.0,
        "failures_per_s": 0.0,
        "error_rate": 0.0,
        "p99_ms": 9.0,
        "models": {
            "a": {"requests_per_s": 10.0, "error_rate": 0.0, "p99_ms": 9.0},
            "b": {"requests_per_s": 0.0, "error_rate": None, "p99_ms": None},
        },
    }
    merged = merge_figures([one, two])
    assert merged["t"] == 60_000 and merged["seconds"] == 60.0
    assert merged["requests_per_s"] == 40.0 and merged["error_rate"] == 0.075 and merged["p99_ms"] == 9.0
    assert merged["models"]["a"] == {"requests_per_s": 40.0, "error_rate": 0.075, "p99_ms": 9.0}
    assert merged["models"]["b"] == {"requests_per_s": 0.0, "error_rate": None, "p99_ms": None}


def test_it_checks_another_engines_snapshot_for_what_merging_reads():
    good = snapshot(1000, entry(), entry("other", streams={"in_flight": 1, "responses_per_s": 2.0}))
    assert check_snapshot(good) is good
    for bad, field in [
        ([], "snapshot"),
        ({**good, "t": "1000"}, "t"),
        ({**good, "server": None}, "server"),
        ({**good, "models": [entry(success_per_s="10")]}, "success_per_s"),
        ({**good, "models": [entry(latency_ms={"p99": "3"})]}, "latency_ms"),
        ({**good, "models": [entry(streams={"in_flight": 1})]}, "streams.responses_per_s"),
        ({**good, "minute": {"requests_per_s": 1.0, "failures_per_s": 0.0, "seconds": 60}}, "minute.t"),
        ({**good, "hour": {"requests_per_s": 1.0, "failures_per_s": 0.0, "seconds": 60, "models": []}}, "hour.models"),
    ]:
        with pytest.raises(ValueError, match=rf"[.']{re.escape(field)}' must"):
            check_snapshot(bad)
    # percentiles named differently on one engine take nothing from the others
    merged = merge_entries([entry(latency_ms={"p50": 1.0}), entry()])
    assert merged["latency_ms"] == {"p50": 1.0}
