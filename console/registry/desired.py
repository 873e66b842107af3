"""The database side of reconciliation: read what should serve, write back what the engine made of it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.store import get_store

# states a version leaves for UNLOADED once it is no longer wanted and the engine no longer has it
_LIVE_STATES = (VersionState.PENDING, VersionState.LOADING, VersionState.READY)


@dataclass(frozen=True)
class ModelPlan:
    """One registered model's desired state: version folders to serve, the active one, the config's digest."""

    name: str
    versions: dict[int, Path]
    active: int | None
    config_digest: str

    @property
    def signature(self) -> tuple:
        """What a load with this plan applied; equal signatures need no reload."""
        return signature_of(self.versions, self.config_digest)


def signature_of(versions: dict[int, Path], config_digest: str) -> tuple:
    return tuple(sorted((number, str(path)) for number, path in versions.items())), config_digest


def read_plans(name: str | None = None) -> list[ModelPlan]:
    """Plans for every registered model (or the one named): versions that should load and have not failed."""
    store = get_store()
    models = RegisteredModel.objects.select_related("active_version").prefetch_related("versions")
    if name is not None:
        models = models.filter(name=name)
    plans = []
    for model in models:
        versions = {
            version.number: store.absolute(version.artifact)
            for version in model.versions.all()
            if version.should_load and version.artifact and version.state != VersionState.FAILED
        }
        plans.append(ModelPlan(model.name, versions, model.active_number, store.config_digest(model.name)))
    return plans


def mark_loading(name: str, numbers: set[int]) -> None:
    """Show the versions about to load as LOADING."""
    if numbers:
        ModelVersion.objects.filter(model__name=name, number__in=numbers).exclude(state=VersionState.LOADING).update(
            state=VersionState.LOADING
        )


def record_outcome(name: str, ready: set[int], failed: dict[int, str]) -> None:
    """Write each version's state from what the engine holds now; only rows that change are saved."""
    with transaction.atomic():
        for version in ModelVersion.objects.filter(model__name=name).select_for_update():
            state, error = _state_after(version, ready, failed)
            if (state, error) != (version.state, version.error):
                version.state, version.error = state, error
                version.save(update_fields=["state", "error", "state_changed_at"])


def _state_after(version: ModelVersion, ready: set[int], failed: dict[int, str]) -> tuple[str, str]:
    if version.number in failed:
        return VersionState.FAILED, failed[version.number]
    if version.number in ready:
        return VersionState.READY, ""
    if not version.should_load and version.state in _LIVE_STATES:
        return VersionState.UNLOADED, ""
    if version.should_load and version.state == VersionState.READY:
        return VersionState.PENDING, ""  # the engine lost it; the next pass loads it again
    return version.state, version.error
