"""/v2 repository control of registered models: load and unload through the registry, failures read back."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services.lookups import ACTIVE_POLICY
from console.registry.services.notices import notify_changed
from engine.api import SYSTEM


def v2_load(actor: Any, name: str) -> list[int] | None:
    """A /v2 load of a registered model: its active version (or newest usable one) should serve.

    Returns the version numbers asked for, or None when the registry does not know the model.
    """
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().filter(name=name).first()
        if model is None:
            return None
        versions = list(model.versions.exclude(artifact=""))
        chosen = [v for v in versions if v.should_load]
        if not chosen:
            usable = [v for v in versions if v.state != VersionState.FAILED] or versions
            active = next((v for v in versions if v.pk == model.active_version_id), None)
            pick = active or (max(usable, key=lambda v: v.number) if usable else None)
            chosen = [pick] if pick is not None else []
        for version in chosen:
            version.request_load()
        AuditEvent.record(actor, "v2.load", name, versions=[v.number for v in chosen])
        notify_changed(name)
    return [v.number for v in chosen]


def load_at_start_up(names: tuple[str, ...]) -> list[str]:
    """Triton's --load-model in explicit mode: the named registered models (`*`: every one) should serve, as a /v2
    load by the engine (SYSTEM) would ask; the names the registry does not know, for the caller to report."""
    if names == ("*",):
        names = tuple(RegisteredModel.objects.order_by("name").values_list("name", flat=True))
    return [name for name in names if v2_load(SYSTEM, name) is None]


def v2_unload(actor: Any, name: str) -> bool:
    """A /v2 unload of a registered model: no version should serve (and no traffic policy stays). False when the
    registry does not know it."""
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().filter(name=name).first()
        if model is None:
            return False
        for version in model.versions.filter(should_load=True):
            version.request_unload()
        detail: dict[str, Any] = {}
        if model.traffic_mode != "active":  # its versions leave the engine, and the policy with them
            detail["traffic_policy"] = model.traffic_policy
            model.traffic_policy = ACTIVE_POLICY
            model.save(update_fields=["traffic_policy"])
        AuditEvent.record(actor, "v2.unload", name, **detail)
        notify_changed(name)
    return True


def failures_of(name: str, numbers: list[int], replica: str) -> str:
    """The reasons of the asked-for versions that failed (everywhere, or on this replica), joined; empty when none
    did."""
    if not numbers:
        return "no version of it has files in the model store"
    versions = ModelVersion.objects.filter(model__name=name, number__in=numbers)
    versions = versions.prefetch_related("on_replicas__replica")
    reasons = {}
    for version in versions.order_by("number"):
        here = [row for row in version.on_replicas.all() if row.replica.name == replica]
        if here and here[0].state == VersionState.FAILED:
            reasons[version.number] = here[0].error
        elif version.state == VersionState.FAILED:
            reasons[version.number] = version.error
    return "; ".join(f"version {number}: {reason}" for number, reason in reasons.items())
