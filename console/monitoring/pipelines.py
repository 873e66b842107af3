"""An ensemble on /monitoring/: the ensemble and its steps side by side, from the snapshots every chart reads.

The steps are read by console.registry.pipeline (the model page's graph reads them the same way) from the config the
engine serves. A dashboard that selects an ensemble gets each snapshot narrowed to the ensemble and its step models,
with a `pipeline` entry: the ensemble's numbers, each step's numbers (the step model's versions combined when the
step uses the served version, Triton's -1; the pinned version's otherwise) and where an ensemble request's time goes
(each step's mean request latency, its share of the ensemble's mean, the time outside every step).

A step model that other callers use too counts their requests as well, so a step's requests are at least the
ensemble's (`from_ensembles_per_s` is the part ensembles sent); steps that run at once overlap, so their shares can
add up past 1, and the time outside the steps is then 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from console.registry.pipeline import SERVED, Step, is_ensemble, steps_of
from engine.api import InferaError, InferenceServer, Snapshot, narrow

ENSEMBLE_PROTOCOL = "ensemble"  # how the engine's ensemble scheduler marks the requests its steps send
RATES = ("success_per_s", "failure_per_s", "inferences_per_s")
MEANS = ("mean_latency_ms", "queue_ms", "compute_ms")  # per request, weighted by each version's successes

Entry = dict[str, Any]


@dataclass(frozen=True)
class Pipeline:
    """A served ensemble and its steps, in step order."""

    name: str
    steps: tuple[Step, ...]

    @property
    def models(self) -> frozenset[str]:
        """The ensemble and every model a step calls."""
        return frozenset({self.name, *(step.model_name for step in self.steps)})

    def describe(self) -> dict[str, Any]:
        """What the page lays out before any numbers: the ensemble and its steps."""
        return {"model": self.name, "steps": [_step_head(step) for step in self.steps]}

    def narrow(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` with the entries of the ensemble and its step models only, and their `pipeline` numbers."""
        models = [entry for entry in snapshot["models"] if entry["name"] in self.models]
        return {**snapshot, "models": models, "pipeline": self.numbers(models)}

    def numbers(self, models: list[Entry]) -> dict[str, Any]:
        """The ensemble's and each step's numbers in one snapshot's `models` entries."""
        ensemble = combined(entry for entry in models if entry["name"] == self.name)
        ensemble["queue_ms"] = None  # an ensemble has no queue of its own (the engine counts 0): its steps queue
        steps = []
        for step in self.steps:
            entries = [entry for entry in models if _serves(step, entry)]
            numbers = combined(entries)
            steps.append(
                {
                    **_step_head(step),
                    # the versions that answered ensembles in this interval (the one served, or two under a canary)
                    "versions": sorted(e["version"] for e in entries if e["protocols"].get(ENSEMBLE_PROTOCOL)),
                    **numbers,
                    "share": _ratio(numbers["mean_latency_ms"], ensemble["mean_latency_ms"]),
                }
            )
        return {**self.describe(), "ensemble": ensemble, "steps": steps, "outside_steps_ms": _outside(ensemble, steps)}


@dataclass(frozen=True)
class Selection:
    """What one dashboard looks at: every model (no model), one model, or an ensemble with its steps."""

    model: str | None
    pipeline: Pipeline | None = None

    @classmethod
    def of(cls, server: InferenceServer | None, model: str | None) -> Selection:
        """The selection of `model` as `server` serves it now (an ensemble's steps come from its served config)."""
        return cls(model, pipeline_of(server, model))

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """`snapshot` as this dashboard sees it."""
        return self.pipeline.narrow(snapshot) if self.pipeline is not None else narrow(snapshot, self.model)


def pipeline_of(server: InferenceServer | None, name: str | None) -> Pipeline | None:
    """The pipeline of `name` when `server` serves it and it is an ensemble; None otherwise."""
    if server is None or not name:
        return None
    try:
        config = server.model_config_dict(name)
    except InferaError:  # not loaded (yet, or any more)
        return None
    return Pipeline(name, tuple(steps_of(config))) if is_ensemble(config) else None


def model_choices(server: InferenceServer | None) -> tuple[list[str], list[str]]:
    """The served ensembles and the other served models, each sorted: the page's two groups of models."""
    if server is None:
        return [], []
    names = sorted({served.name for served in server.served_versions()})
    ensembles = [name for name in names if pipeline_of(server, name) is not None]
    return ensembles, [name for name in names if name not in ensembles]


def combined(entries: Iterable[Entry]) -> dict[str, Any]:
    """Several versions' entries of one snapshot as one: rates summed, percentiles the worst, means weighted."""
    entries = list(entries)
    numbers: dict[str, Any] = {field: round(sum(e[field] for e in entries), 3) for field in RATES}
    from_ensembles = sum(e["protocols"].get(ENSEMBLE_PROTOCOL, 0.0) for e in entries)
    numbers["from_ensembles_per_s"] = round(from_ensembles, 3)
    latencies = [e["latency_ms"] for e in entries if e["latency_ms"]]
    numbers["latency_ms"] = {p: max(each[p] for each in latencies) for p in latencies[0]} if latencies else None
    for field in MEANS:
        weighted = [(e[field], e["success_per_s"]) for e in entries if e[field] is not None and e["success_per_s"]]
        weight = sum(w for _, w in weighted)
        numbers[field] = round(sum(value * w for value, w in weighted) / weight, 3) if weight else None
    return numbers


def _step_head(step: Step) -> dict[str, Any]:
    return {
        "index": step.index,
        "model": step.model_name,
        "version": None if step.model_version == SERVED else step.model_version,  # None: the served one
    }


def _serves(step: Step, entry: Entry) -> bool:
    return entry["name"] == step.model_name and step.model_version in (SERVED, entry["version"])


def _ratio(part: float | None, whole: float | None) -> float | None:
    return round(part / whole, 4) if part is not None and whole else None


def _outside(ensemble: dict[str, Any], steps: list[dict[str, Any]]) -> float | None:
    """Mean time of an ensemble request spent in no step (moving tensors, scheduling); 0 when steps overlap."""
    total, inside = ensemble["mean_latency_ms"], [step["mean_latency_ms"] for step in steps]
    if total is None or any(ms is None for ms in inside):
        return None
    return round(max(total - sum(inside), 0.0), 3)
