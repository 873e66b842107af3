"""What /monitoring/ gets for an ensemble: its steps with their numbers, and where the ensemble's time goes."""

from __future__ import annotations

import pytest

from console.monitoring.pipelines import Pipeline, Selection, combined, model_choices, pipeline_of
from console.registry.pipeline import SERVED, Step


def names(snapshot: dict) -> set[str]:
    return {entry["name"] for entry in snapshot["models"]}


async def test_it_lists_the_steps_of_an_ensemble_with_their_numbers(ensemble):
    await ensemble.infer("pair", 3)
    await ensemble.infer("first", 2)  # a step's model called directly as well
    seen = Selection.of(ensemble.server, "pair").apply(ensemble.tick())

    assert names(seen) == {"pair", "first", "second"}
    pipeline = seen["pipeline"]
    assert pipeline["model"] == "pair"
    heads = [(s["index"], s["model"], s["version"]) for s in pipeline["steps"]]
    assert heads == [(0, "first", None), (1, "second", None)]
    assert pipeline["ensemble"]["success_per_s"] == 3.0
    first, second = pipeline["steps"]
    # each step's count includes the ensemble's calls; the first also counts the two direct ones
    assert (first["success_per_s"], first["from_ensembles_per_s"]) == (5.0, 3.0)
    assert (second["success_per_s"], second["from_ensembles_per_s"]) == (3.0, 3.0)
    assert first["versions"] == second["versions"] == [1]
    for numbers in (pipeline["ensemble"], first, second):
        assert numbers["failure_per_s"] == 0.0
        assert numbers["latency_ms"]["p50"] <= numbers["latency_ms"]["p99"]
    for step in (first, second):
        assert step["queue_ms"] is not None and step["compute_ms"] is not None
    assert pipeline["ensemble"]["queue_ms"] is None and pipeline["ensemble"]["compute_ms"] is None


async def test_it_splits_the_ensembles_time_between_its_steps_and_the_rest(ensemble):
    await ensemble.infer("pair", 4)
    pipeline = Selection.of(ensemble.server, "pair").apply(ensemble.tick())["pipeline"]

    total = pipeline["ensemble"]["mean_latency_ms"]
    steps = [step["mean_latency_ms"] for step in pipeline["steps"]]
    # a chain: each ensemble request holds one request of each step, one after the other
    assert sum(steps) + pipeline["outside_steps_ms"] == pytest.approx(total, abs=0.005)
    for step in pipeline["steps"]:
        assert step["share"] == pytest.approx(step["mean_latency_ms"] / total, abs=1e-3)
    assert sum(step["share"] for step in pipeline["steps"]) <= 1.0 + 1e-3


async def test_it_shows_an_idle_ensemble_with_empty_numbers(ensemble):
    pipeline = Selection.of(ensemble.server, "pair").apply(ensemble.tick())["pipeline"]
    assert pipeline["ensemble"]["success_per_s"] == 0.0 and pipeline["ensemble"]["mean_latency_ms"] is None
    assert all(step["share"] is None for step in pipeline["steps"])
    assert pipeline["outside_steps_ms"] is None


async def test_it_narrows_a_model_that_is_no_ensemble_to_itself(ensemble):
    await ensemble.infer("pair", 1)
    seen = Selection.of(ensemble.server, "second").apply(ensemble.tick())
    assert names(seen) == {"second"} and "pipeline" not in seen
    assert Selection.of(ensemble.server, None).apply(ensemble.sampler.latest) is ensemble.sampler.latest
    assert pipeline_of(ensemble.server, "not-loaded") is None
    assert pipeline_of(None, "pair") is None


async def test_it_describes_the_pipeline_and_groups_the_models(ensemble):
    pipeline = pipeline_of(ensemble.server, "pair")
    assert pipeline.describe() == {
        "model": "pair",
        "steps": [{"index": 0, "model": "first", "version": None}, {"index": 1, "model": "second", "version": None}],
    }
    assert model_choices(ensemble.server) == (["pair"], ["first", "second"])
    assert model_choices(None) == ([], [])


def entry(version: int, success: float, mean_ms: float, p99: float, from_ensembles: float = 0.0) -> dict:
    """A sampler entry of model `m` with the fields a pipeline reads."""
    return {
        "name": "m",
        "version": version,
        "success_per_s": success,
        "failure_per_s": 0.0,
        "inferences_per_s": success,
        "latency_ms": {"p50": mean_ms, "p95": p99, "p99": p99},
        "mean_latency_ms": mean_ms,
        "queue_ms": 1.0,
        "compute_ms": mean_ms - 1.0,
        "protocols": {"ensemble": from_ensembles} if from_ensembles else {"http": success},
    }


def test_it_combines_the_versions_a_served_step_may_reach():
    # a canary: the served step's requests go to two versions, weighted by their requests
    numbers = combined([entry(1, 3.0, 2.0, 5.0, from_ensembles=3.0), entry(2, 1.0, 6.0, 9.0, from_ensembles=1.0)])
    assert numbers["success_per_s"] == 4.0 and numbers["from_ensembles_per_s"] == 4.0
    assert numbers["mean_latency_ms"] == 3.0  # (3 * 2 + 1 * 6) / 4
    assert numbers["latency_ms"]["p99"] == 9.0  # the worst version's


def test_it_counts_a_pinned_step_on_its_version_only():
    ensemble = {**entry(1, 2.0, 10.0, 10.0), "name": "ens"}
    models = [ensemble, entry(1, 7.0, 1.0, 1.0), entry(2, 2.0, 4.0, 4.0, from_ensembles=2.0)]
    pinned = Pipeline("ens", (Step(0, "m", 2, {}, {}),)).numbers(models)["steps"][0]
    served = Pipeline("ens", (Step(0, "m", SERVED, {}, {}),)).numbers(models)["steps"][0]
    assert (pinned["version"], pinned["success_per_s"], pinned["share"]) == (2, 2.0, 0.4)
    assert pinned["versions"] == served["versions"] == [2]
    assert (served["version"], served["success_per_s"]) == (None, 9.0)
