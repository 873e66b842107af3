"""The registry's graph of ensembles: which models each registered ensemble calls.

One config alone cannot tell that an ensemble would call itself through others, nor that the only callers of a
model are ensembles it calls itself: these read the whole registry. Every registered version with a config counts
(any of them may be asked to load again), and the engine's own check decides (engine.serving.admission).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db.models import Q

from console.registry import pipeline
from console.registry.models import ModelVersion
from engine.api import InvalidArgument, ModelConfig, check_ensemble_cycle, config_to_dict


def registered_calls() -> dict[str, set[str]]:
    """Model name -> the models the steps of its registered versions call (ensembles only)."""
    calls: dict[str, set[str]] = {}
    versions = ModelVersion.objects.filter(
        Q(config__platform=pipeline.ENSEMBLE) | Q(config__backend=pipeline.ENSEMBLE)
    ).values_list("model__name", "config")
    for name, config in versions:
        calls.setdefault(name, set()).update(step.model_name for step in pipeline.steps_of(config) if step.model_name)
    return calls


def cycle_problem(
    name: str, configs: Iterable[ModelConfig | None], arriving: Mapping[str, ModelConfig | None] | None = None
) -> str | None:
    """Why versions of `name` with `configs` would make an ensemble call itself (the cycle, named), or None.

    `arriving` holds the configs of other models that arrive with them (the other folders of one archive)."""
    wanted = [config for config in configs if config is not None]
    if not any(config.backend_name == pipeline.ENSEMBLE for config in wanted):
        return None
    calls = registered_calls()
    for other, config in (arriving or {}).items():
        if other != name and config is not None:
            steps = pipeline.steps_of(config_to_dict(config))
            calls.setdefault(other, set()).update(step.model_name for step in steps)
    try:
        check_ensemble_cycle(name, wanted, lambda model: calls.get(model, ()))
    except InvalidArgument as exc:
        return exc.message
    return None


def reached_from(name: str, calls: Mapping[str, Iterable[str]]) -> set[str]:
    """The models `name` calls, directly or through the ensembles it calls."""
    found: set[str] = set()
    waiting = list(calls.get(name, ()))
    while waiting:
        model = waiting.pop()
        if model not in found:
            found.add(model)
            waiting.extend(calls.get(model, ()))
    return found
