"""Which measured points are worth having (the Pareto front of throughput against p99 latency) and which config to
recommend under a latency budget. Plain Python over the points' JSON form
(engine.serving.analysis.LoadPoint.to_dict)."""

from __future__ import annotations

from typing import Any

Point = dict[str, Any]


def usable(point: Point) -> bool:
    """A point that answered every request it sent: failures disqualify a config, whatever its speed."""
    return point.get("p99_ms") is not None and point.get("requests", 0) > 0 and not point.get("failures")


def pareto_front(points: list[Point]) -> list[int]:
    """Indexes of the usable points no other usable point beats on both counts (at least as much throughput and at
    most as much p99 latency, one of them strictly), by rising p99."""
    candidates = [i for i, point in enumerate(points) if usable(point)]
    front = [i for i in candidates if not any(_dominates(points[j], points[i]) for j in candidates if j != i)]
    return sorted(front, key=lambda i: (points[i]["p99_ms"], -points[i]["throughput"]))


def _dominates(a: Point, b: Point) -> bool:
    return (
        a["throughput"] >= b["throughput"]
        and a["p99_ms"] <= b["p99_ms"]
        and (a["throughput"] > b["throughput"] or a["p99_ms"] < b["p99_ms"])
    )


def recommend(points: list[Point], candidates: list[dict[str, Any]], budget_ms: float) -> tuple[dict[str, Any], str]:
    """(recommendation, note): the config whose point has the highest throughput with p99 within the budget (ties:
    the lower p99, then the earlier candidate), or ({}, why none does)."""
    within = [point for point in points if usable(point) and point["p99_ms"] <= budget_ms]
    if not within:
        measured = [point for point in points if usable(point)]
        if not measured:
            return {}, "no config answered every request: there is nothing to recommend"
        best = min(measured, key=lambda point: point["p99_ms"])
        return {}, (
            f"no config kept p99 within {budget_ms:g} ms: the lowest was {best['p99_ms']:.2f} ms "
            f"({candidates[best['candidate']]['label']} at concurrency {best['concurrency']})"
        )
    best = max(within, key=lambda point: (point["throughput"], -point["p99_ms"], -point["candidate"]))
    candidate = candidates[best["candidate"]]
    return {
        "candidate": best["candidate"],
        "label": candidate["label"],
        "override": candidate["override"],
        "concurrency": best["concurrency"],
        "throughput": best["throughput"],
        "p99_ms": best["p99_ms"],
        "budget_ms": budget_ms,
    }, ""
