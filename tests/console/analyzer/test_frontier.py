"""The Pareto front of throughput against p99 latency, and the recommendation under a latency budget."""

from __future__ import annotations

from console.analyzer.frontier import pareto_front, recommend

CANDIDATES = [
    {"label": "batch 8 · delay 0 µs · 1 instance", "override": {"max_batch_size": 8}},
    {"label": "batch 8 · delay 500 µs · 1 instance", "override": {"max_batch_size": 8}},
]


def point(candidate: int, concurrency: int, throughput: float, p99: float | None, failures: int = 0) -> dict:
    return {
        "candidate": candidate,
        "concurrency": concurrency,
        "requests": 100 if p99 is not None else 0,
        "failures": failures,
        "throughput": throughput,
        "p99_ms": p99,
    }


def test_it_keeps_the_points_no_other_beats_on_both_counts():
    points = [
        point(0, 1, 100, 1.0),  # front: the lowest latency
        point(0, 2, 180, 2.0),  # front
        point(1, 1, 150, 3.0),  # beaten by (0, 2): less throughput, more latency
        point(1, 2, 300, 5.0),  # front: the most throughput
        point(1, 4, 300, 6.0),  # beaten by (1, 2): as much throughput, more latency
    ]
    assert pareto_front(points) == [0, 1, 3]


def test_it_keeps_equal_points_both_on_the_front():
    assert pareto_front([point(0, 1, 100, 1.0), point(1, 1, 100, 1.0)]) == [0, 1]


def test_it_leaves_out_points_that_failed_or_measured_nothing():
    points = [point(0, 1, 100, 1.0), point(0, 2, 500, 0.5, failures=3), point(1, 1, 0, None)]
    assert pareto_front(points) == [0]


def test_it_recommends_the_most_throughput_within_the_budget():
    points = [point(0, 1, 100, 1.0), point(0, 2, 180, 2.0), point(1, 4, 300, 5.0)]
    recommendation, note = recommend(points, CANDIDATES, budget_ms=2.5)
    assert note == ""
    assert recommendation["candidate"] == 0 and recommendation["concurrency"] == 2
    assert recommendation["throughput"] == 180 and recommendation["p99_ms"] == 2.0
    assert recommendation["label"] == CANDIDATES[0]["label"] and recommendation["override"] == {"max_batch_size": 8}
    assert recommend(points, CANDIDATES, budget_ms=10)[0]["candidate"] == 1


def test_it_breaks_a_tie_by_the_lower_latency_then_the_earlier_config():
    assert recommend([point(1, 1, 100, 2.0), point(0, 1, 100, 1.0)], CANDIDATES, 5)[0]["candidate"] == 0
    assert recommend([point(1, 1, 100, 1.0), point(0, 2, 100, 1.0)], CANDIDATES, 5)[0]["candidate"] == 0


def test_it_recommends_no_point_within_the_budget_that_failed():
    points = [point(0, 1, 100, 1.0), point(1, 1, 900, 0.5, failures=1)]
    assert recommend(points, CANDIDATES, 2)[0]["candidate"] == 0


def test_it_says_why_nothing_fits_the_budget():
    points = [point(0, 1, 100, 3.0), point(1, 1, 150, 4.0)]
    recommendation, note = recommend(points, CANDIDATES, budget_ms=2)
    assert recommendation == {}
    assert note == (
        "no config kept p99 within 2 ms: the lowest was 3.00 ms (batch 8 · delay 0 µs · 1 instance at concurrency 1)"
    )
    assert recommend([], CANDIDATES, 2) == ({}, "no config answered every request: there is nothing to recommend")
