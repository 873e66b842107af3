"""What the registry's actions read and check alike: callers, the admitting server, models and versions,
ensembles that call a model, traffic policies; and the switch of a model's active version."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db.models import Q

from console.accounts.principals import principal_for
from console.audit.models import AuditEvent, actor_user
from console.registry import ensemble_graph, pipeline
from console.registry.models import ModelVersion, RegisteredModel
from console.registry.services.refusals import Conflict, NotFound, RegistryError
from console.registry.store import get_store
from engine.api import (
    SYSTEM,
    InferaError,
    InferenceServer,
    ModelConfig,
    Principal,
    TrafficPolicy,
    parse_config_json,
    policy_from_dict,
)

logger = logging.getLogger("console.registry")


def caller_of(actor: Any) -> Principal:
    """The engine's Principal for an actor: a user's role decides; the system and the shell are trusted."""
    if isinstance(actor, Principal):
        return actor
    user = actor_user(actor)
    return principal_for(user) if user is not None else SYSTEM


def admitting(server: InferenceServer | None) -> InferenceServer:
    """The server whose door versions from outside come in by: the serving process's own (`runtime_of(request)`,
    the reconciler's), which trial-loads them against the GPUs it places instances on. Outside a serving process (a
    management command, a test's WSGI client) an engine of this process's own admits, with this machine's devices.
    """
    return server if server is not None else InferenceServer(settings=settings.INFERA.engine)


def get_model(name: str) -> RegisteredModel:
    try:
        return RegisteredModel.objects.select_related("active_version").get(name=name)
    except RegisteredModel.DoesNotExist:
        raise NotFound(f"no registered model named '{name}'") from None


def get_version(name: str, number: int) -> ModelVersion:
    model = get_model(name)
    try:
        return model.versions.select_related("model", "model__active_version").get(number=number)
    except ModelVersion.DoesNotExist:
        known = ", ".join(str(n) for n in model.versions.values_list("number", flat=True)) or "none"
        raise NotFound(f"model '{name}' has no version {number} (versions: {known})") from None


def ensembles_using(name: str, number: int | None = None) -> list[str]:
    """The registered ensembles whose active config has a step calling model `name` (pinned to version `number`,
    when given), by name; not those that `name` itself calls (a cycle stored before cycles were refused: each of
    its members may be deleted, the others then wait for a model that is gone, UNAVAILABLE)."""
    candidates = list(
        RegisteredModel.objects.select_related("active_version").filter(
            Q(active_version__config__platform=pipeline.ENSEMBLE) | Q(active_version__config__backend=pipeline.ENSEMBLE)
        )
    )
    steps = {ensemble.name: pipeline.steps_of(ensemble.active_version.config) for ensemble in candidates}
    calls = {model: [step.model_name for step in found] for model, found in steps.items()}
    in_cycle = ensemble_graph.reached_from(name, calls)
    return [
        model
        for model, found in steps.items()
        if model != name
        and model not in in_cycle
        and any(step.model_name == name and number in (None, step.model_version) for step in found)
    ]


def check_no_cycle(
    name: str, configs: list[ModelConfig | None], arriving: dict[str, ModelConfig | None] | None = None
) -> None:
    """Refuse (400, naming the cycle) versions of `name` that would make an ensemble call itself, directly or through
    other registered ensembles (or those `arriving` with them), before anything of them is recorded."""
    problem = ensemble_graph.cycle_problem(name, configs, arriving)
    if problem is not None:
        raise RegistryError(problem)


def locked_model(model: RegisteredModel) -> RegisteredModel:
    """The model's row, locked for the rest of the transaction, with its active version."""
    return RegisteredModel.objects.select_for_update(of=("self",)).select_related("active_version").get(pk=model.pk)


def switch_active(actor: Any, model: RegisteredModel, version: ModelVersion) -> None:
    """Within a transaction: `version` takes unversioned traffic, its config is the store's, and it is audited."""
    previous = model.active_number
    model.active_version = version
    model.save(update_fields=["active_version"])
    get_store().write_config(model.name, parse_config_json(version.config))
    AuditEvent.record(actor, "version.activate", version.label, previous=previous)


def model_config(model: RegisteredModel) -> ModelConfig | None:
    """The config new versions of `model` start from: its active version's, else the store's file."""
    if model.active_version_id and model.active_version.config:
        return parse_config_json(model.active_version.config)
    try:
        return get_store().read_config(model.name)
    except Exception:  # an unreadable file is reported by the trial load, not here
        return None


def config_named(name: str) -> ModelConfig | None:
    """The config new versions of the model `name` start from; None when it is not registered."""
    model = RegisteredModel.objects.select_related("active_version").filter(name=name).first()
    return model_config(model) if model is not None else None


ACTIVE_POLICY = TrafficPolicy().to_dict()


def traffic_policy_of(model: RegisteredModel) -> TrafficPolicy:
    """The model's desired traffic policy (every request to the active version when none was set, or when the one
    stored is out of today's ranges: the engine refuses to put it in force)."""
    try:
        return policy_from_dict(model.traffic_policy or {})
    except InferaError as exc:
        logger.warning("model '%s': its stored traffic policy is refused: %s", model.name, exc.message)
        return TrafficPolicy()


def check_out_of_traffic(version: ModelVersion, doing: str) -> None:
    """Refuse to unload or delete a version that the model's traffic policy sends requests to."""
    policy = traffic_policy_of(version.model)
    if version.number in policy.versions():
        raise Conflict(
            f"version {version.number} of model '{version.model.name}' is in its {policy.mode} traffic policy; "
            f"change the policy before {doing} it"
        )
