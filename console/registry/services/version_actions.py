"""A version's desired state: activate, load, unload, delete."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, VersionState
from console.registry.services.lookups import (
    check_out_of_traffic,
    ensembles_using,
    locked_model,
    switch_active,
    traffic_policy_of,
)
from console.registry.services.notices import notify_changed
from console.registry.services.refusals import Conflict, in_use
from console.registry.store import get_store


def activate(actor: Any, version: ModelVersion) -> ModelVersion:
    """Make a READY version the one that takes unversioned traffic (roll forward or back)."""
    if version.state != VersionState.READY:
        raise Conflict(
            f"version {version.number} of '{version.model.name}' is {version.state}; only a READY version can be "
            "activated" + (" (load it first)" if version.state == VersionState.UNLOADED else "")
        )
    policy = traffic_policy_of(version.model)
    if policy.mode == "shadow" and policy.candidate == version.number:
        raise Conflict(
            f"version {version.number} of '{version.model.name}' is the candidate of its shadow traffic policy; "
            "promote it or change the policy first"
        )
    with transaction.atomic():
        model = locked_model(version.model)
        switch_active(actor, model, version)
        notify_changed(model.name)
    version.model = model
    return version


def load_version(actor: Any, version: ModelVersion) -> ModelVersion:
    """Ask for a version to be loaded (again: a FAILED one is retried)."""
    if not version.loadable:
        raise Conflict(f"version {version.number} of '{version.model.name}' has no files in the store to load")
    with transaction.atomic():
        version.request_load()
        AuditEvent.record(actor, "version.load", version.label)
        notify_changed(version.model.name)
    return version


def unload_version(actor: Any, version: ModelVersion) -> ModelVersion:
    """Ask for a version to be unloaded; the active one stays until another is activated, and one that the model's
    traffic policy sends requests to until the policy changes."""
    if version.is_active:
        raise Conflict(
            f"version {version.number} is the active version of '{version.model.name}'; activate another version "
            "before unloading it"
        )
    check_out_of_traffic(version, "unloading")
    with transaction.atomic():
        version.request_unload()
        AuditEvent.record(actor, "version.unload", version.label)
        notify_changed(version.model.name)
    return version


def delete_version(actor: Any, version: ModelVersion) -> None:
    """Remove an inactive version from the registry and the store."""
    if version.is_active:
        raise Conflict(
            f"version {version.number} is the active version of '{version.model.name}'; activate another version "
            "before deleting it"
        )
    check_out_of_traffic(version, "deleting")
    name, number = version.model.name, version.number
    if ensembles := ensembles_using(name, number):
        raise in_use(f"version {number} of '{name}'", ensembles)
    with transaction.atomic():
        version.delete()
        AuditEvent.record(actor, "version.delete", f"{name}/{number}", sha256=version.sha256)
        transaction.on_commit(lambda: get_store().delete_version(name, number))
        notify_changed(name)
