"""Registered models: register, describe, delete (refused while an ensemble calls it), imports recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import IntegrityError, transaction

from console.audit.models import AuditEvent, actor_user
from console.registry.models import RegisteredModel, model_name_validator
from console.registry.services.lookups import ensembles_using
from console.registry.services.notices import notify_changed
from console.registry.services.refusals import Conflict, in_use
from console.registry.store import get_store


def register_model(
    actor: Any, name: str, description: str = "", backend: str = "", platform: str = ""
) -> RegisteredModel:
    """A new model with no versions yet."""
    model_name_validator(name)
    if RegisteredModel.objects.filter(name__iexact=name).exclude(name=name).exists():
        # two folders differing only in case are one folder on case-insensitive filesystems
        raise Conflict(f"a model whose name differs from '{name}' only in case is already registered")
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(
                name=name, description=description, backend=backend, platform=platform, created_by=actor_user(actor)
            )
            AuditEvent.record(actor, "model.register", name, description=description)
    except IntegrityError:
        raise Conflict(f"a model named '{name}' is already registered") from None
    return model


def update_model(actor: Any, model: RegisteredModel, **changes: Any) -> RegisteredModel:
    """Change a model's description, `on_demand` or `pinned` (the memory flags reload its versions with them)."""
    with transaction.atomic():
        changed = {key: {"from": getattr(model, key), "to": value} for key, value in changes.items()}
        for key, value in changes.items():
            setattr(model, key, value)
        model.save(update_fields=list(changes))
        AuditEvent.record(actor, "model.update", model.name, **changed)
        if {"on_demand", "pinned"} & set(changes):
            notify_changed(model.name)
    return model


def record_engine_memory_action(action: str, name: str, version: int, **detail: Any) -> None:
    """A load on demand or an eviction the engine's memory budget made: audited as the engine's, not a user's."""
    AuditEvent.record("engine", f"engine.{action}", name, version=version, **detail)


def delete_model(actor: Any, model: RegisteredModel) -> None:
    """Forget the model and remove its folder from the store; the reconciler unloads it from the engine.

    Refused (409) while a registered ensemble's active config calls it.
    """
    name = model.name
    if ensembles := ensembles_using(name):
        raise in_use(f"model '{name}'", ensembles)
    with transaction.atomic():
        numbers = list(model.versions.values_list("number", flat=True))
        RegisteredModel.objects.filter(pk=model.pk).update(active_version=None)
        model.delete()
        AuditEvent.record(actor, "model.delete", name, versions=numbers)
        transaction.on_commit(lambda: get_store().delete_model(name))
        notify_changed(name)


def record_import(actor: Any, model: RegisteredModel, numbers: list[int], source: Path) -> None:
    """Audit and announce versions registered from an existing repository (the importer's one write of both)."""
    AuditEvent.record(actor, "repository.import", model.name, source=source.name, versions=numbers)
    notify_changed(model.name)
