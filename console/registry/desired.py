"""The database side of reconciliation: read what should serve, write back what the engine made of it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.store import get_store


@dataclass(frozen=True)
class ModelPlan:
    """One registered model's desired state: version folders to serve with their own configs, and the active one."""

    name: str
    versions: dict[int, Path]
    active: int | None
    configs: dict[int, dict] = field(default_factory=dict)  # each version's effective config, as recorded
    traffic: dict = field(default_factory=dict)  # the traffic policy in the engine's JSON form; empty: active only

    @property
    def signature(self) -> tuple:
        """What a load with this plan applied; equal signatures need no reload."""
        return signature_of(self.versions, self.configs)


def signature_of(versions: dict[int, Path], configs: dict[int, dict]) -> tuple:
    return tuple((number, str(path), _digest(configs.get(number))) for number, path in sorted(versions.items()))


def _digest(config: dict | None) -> str:
    if not config:
        return ""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def read_plans(name: str | None = None) -> list[ModelPlan]:
    """Plans for every registered model (or the one named): versions that should load and have not failed."""
    store = get_store()
    models = RegisteredModel.objects.select_related("active_version").prefetch_related("versions")
    if name is not None:
        models = models.filter(name=name)
    plans = []
    for model in models:
        wanted = [
            version
            for version in model.versions.all()
            if version.should_load and version.artifact and version.state != VersionState.FAILED
        ]
        plans.append(
            ModelPlan(
                model.name,
                {version.number: store.absolute(version.artifact) for version in wanted},
                model.active_number,
                {version.number: version.config for version in wanted if version.config},
                model.traffic_policy or {},
            )
        )
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
            version.apply_engine_state(version.number in ready, failed.get(version.number))
