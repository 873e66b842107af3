"""The database side of reconciliation: read what should serve, write back what the engine made of it.

Each replica writes what its own engine made of each version (console/registry/cluster/states.py); the version's
registry state is the summary over the live replicas. A version that failed on this replica is left out of its plans
until a retry (a load asked for again, a new config), while other replicas that serve it go on.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from django.db import transaction

from console.registry.cluster import states
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.store import ModelStore, get_store


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


def read_plans(replica: str, name: str | None = None, store: ModelStore | None = None) -> list[ModelPlan]:
    """Plans for every registered model (or the one named): versions that should load, have files, and have not
    failed here (nor failed everywhere before any replica tried them, like a refused import). `store` is the
    Runtime's (the process's, `get_store()`, when None)."""
    store = store or get_store()
    models = RegisteredModel.objects.select_related("active_version").prefetch_related("versions")
    if name is not None:
        models = models.filter(name=name)
    models = list(models)
    candidates = [v for model in models for v in model.versions.all() if v.should_load and v.artifact]
    failed_here = states.failed_here(replica, candidates)
    tried = states.tried_anywhere(v for v in candidates if v.state == VersionState.FAILED)
    plans = []
    for model in models:
        wanted = [
            version
            for version in model.versions.all()
            if version.should_load
            and version.artifact
            and version.pk not in failed_here
            and not (version.state == VersionState.FAILED and version.pk not in tried)
        ]
        plans.append(
            ModelPlan(
                model.name,
                {version.number: store.absolute(version.artifact) for version in wanted},
                model.active_number,
                {version.number: with_memory_flags(version.config, model) for version in wanted if version.config},
                model.traffic_policy or {},
            )
        )
    return plans


def with_memory_flags(config: dict, model: RegisteredModel) -> dict:
    """A version's recorded config with its model's `on_demand` and `pinned` as the engine reads them: parameters
    (a config that sets them itself keeps them)."""
    flags = {key: {"string_value": "true"} for key in ("on_demand", "pinned") if getattr(model, key)}
    if not flags:
        return config
    return {**config, "parameters": {**flags, **config.get("parameters", {})}}


def mark_loading(replica: str, name: str, numbers: set[int]) -> None:
    """Show the versions about to load as LOADING on this replica."""
    if numbers:
        with transaction.atomic():
            versions = _locked_versions(name, numbers)
            states.mark_loading(replica, versions)


def record_outcome(replica: str, name: str, ready: set[int], failed: dict[int, str]) -> None:
    """Write each version's state on this replica from what its engine holds now, then the registry's state."""
    with transaction.atomic():
        versions = _locked_versions(name)
        states.record(replica, versions, ready, failed)


def _locked_versions(name: str, numbers: set[int] | None = None) -> list[ModelVersion]:
    """Lock the model's row, then its versions' in number order (inside a transaction): the order every change of
    the registry takes them in (services/lookups.py locks the model first). A join locked by one query locked the
    rows in scan order, and two replicas recording at once with an activation deadlocked on PostgreSQL."""
    RegisteredModel.objects.select_for_update().filter(name=name).first()
    versions = ModelVersion.objects.filter(model__name=name)
    if numbers is not None:
        versions = versions.filter(number__in=numbers)
    return list(versions.order_by("number").select_for_update(of=("self",)))
