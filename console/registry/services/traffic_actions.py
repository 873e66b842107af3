"""Traffic policies: how the requests that name no version are shared among a model's versions (set,
promote, roll back, the engine's automatic rollbacks recorded)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console.audit.models import AuditEvent
from console.registry.models import RegisteredModel, VersionState
from console.registry.services.lookups import ACTIVE_POLICY, caller_of, locked_model, switch_active, traffic_policy_of
from console.registry.services.notices import notify_changed
from console.registry.services.refusals import Conflict, RegistryError
from engine.api import (
    SYSTEM,
    InferaError,
    ModelConfig,
    TrafficPolicy,
    check_traffic_policy,
    parse_config_json,
    policy_from_dict,
)


def set_traffic_policy(actor: Any, model: RegisteredModel, data: Any) -> RegisteredModel:
    """Make a policy (the engine's JSON form) the desired state; the reconciler puts it in force after the versions
    converge. 400 with the reason when it does not fit the READY versions, 403 for callers who may not change models.
    """
    _check_may_change_traffic(actor, model)
    try:
        policy = policy_from_dict(data)
    except InferaError as exc:
        raise RegistryError(exc.message) from None
    with transaction.atomic():
        model = locked_model(model)
        ready = set(model.versions.filter(state=VersionState.READY).values_list("number", flat=True))
        try:
            decoupled = bool((model.shown_config.get("model_transaction_policy") or {}).get("decoupled"))
            configs = _checked_configs(model, policy.versions() | {model.active_number})
            check_traffic_policy(model.name, policy, ready, model.active_number, decoupled=decoupled, configs=configs)
        except InferaError as exc:  # IncompatibleVersion among them: a candidate with other inputs or outputs
            raise RegistryError(exc.message, exc.status) from None
        _write_traffic(actor, model, policy.to_dict(), "traffic.set")
    return model


def _checked_configs(model: RegisteredModel, numbers: set[int | None]) -> dict[int, ModelConfig]:
    """The effective configs these versions were checked with, to compare their tensors (a version whose recorded
    config names no input or output is left out: there is nothing to compare)."""
    rows = model.versions.filter(number__in=[n for n in numbers if n is not None]).exclude(config={})
    return {
        number: parse_config_json(config)
        for number, config in rows.values_list("number", "config")
        if config.get("input") or config.get("output")
    }


def promote_traffic(actor: Any, model: RegisteredModel) -> RegisteredModel:
    """The policy's candidate becomes the active version and every request goes to it: for a canary the version
    with the highest weight that is not active, for a shadow its candidate."""
    _check_may_change_traffic(actor, model)
    with transaction.atomic():
        model = locked_model(model)
        policy = traffic_policy_of(model)
        number = promotion_candidate(policy, model.active_number)
        if number is None:
            raise Conflict(f"model '{model.name}' has no canary or shadow candidate to promote")
        version = model.versions.filter(number=number).first()
        if version is None or version.state != VersionState.READY:
            state = version.state if version is not None else "gone"
            raise Conflict(f"version {number} of '{model.name}' is {state}; only a READY version can be promoted")
        previous = model.active_number
        switch_active(actor, model, version)
        _write_traffic(actor, model, ACTIVE_POLICY, "traffic.promote", version=number, previous=previous)
    return model


def promotion_candidate(policy: TrafficPolicy, active: int | None) -> int | None:
    """The version a promotion makes active, or None when the policy has no candidate."""
    if policy.mode == "shadow":
        return policy.candidate
    if policy.mode == "canary":
        others = [(weight, number) for number, weight in policy.weights.items() if number != active]
        return max(others)[1] if others else None
    return None


def rollback_traffic(actor: Any, model: RegisteredModel) -> RegisteredModel:
    """Every request goes back to the active version (a canary or shadow ends)."""
    _check_may_change_traffic(actor, model)
    with transaction.atomic():
        model = locked_model(model)
        if traffic_policy_of(model).mode == "active":
            raise Conflict(f"model '{model.name}' has no canary or shadow to roll back")
        _write_traffic(actor, model, ACTIVE_POLICY, "traffic.rollback", automatic=False)
    return model


def record_automatic_rollback(name: str, rolled_back: dict[str, Any], reason: str) -> None:
    """The engine's guard put the active version back: the audit log says why, and the desired state follows (unless
    someone changed the policy since)."""
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().filter(name=name).first()
        if model is None:
            return
        if traffic_policy_of(model).to_dict() == rolled_back:
            _write_traffic(SYSTEM, model, ACTIVE_POLICY, "traffic.rollback", automatic=True, reason=reason)
        else:
            AuditEvent.record(
                SYSTEM, "traffic.rollback", name, automatic=True, reason=reason, policy=rolled_back, desired="kept"
            )


def _check_may_change_traffic(actor: Any, model: RegisteredModel) -> None:
    """Traffic is changed by those who may activate versions: operators and admins (403 otherwise)."""
    caller = caller_of(actor)
    if not caller.may_change_models:
        raise RegistryError(f"'{caller.name}' may not change the traffic of model '{model.name}'", 403)


def _write_traffic(actor: Any, model: RegisteredModel, policy: dict[str, Any], action: str, **detail: Any) -> None:
    """Within a transaction: store the desired policy, audit the change from the one before, wake the reconcilers."""
    before = model.traffic_policy or ACTIVE_POLICY
    model.traffic_policy = policy
    model.save(update_fields=["traffic_policy"])
    AuditEvent.record(actor, action, model.name, policy=policy, previous_policy=before, **detail)
    notify_changed(model.name)
