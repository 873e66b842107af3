"""Register the models of an existing Triton repository (the seeded demo, or a team's own repository).

Versions are copied into the model store unless the repository is the store itself. Each version's effective
config is computed as the engine would; the versions the model's version policy selects are marked to load,
and the newest of them becomes active. Versions already registered are left as they are, so importing twice
changes nothing.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from console.audit.models import actor_user
from console.registry import ensemble_graph
from console.registry.describe import describe
from console.registry.models import ModelVersion, RegisteredModel, VersionState, model_name_validator
from console.registry.services import model_actions
from console.registry.store import ModelStore, folder_digest, get_store
from engine.api import (
    CONFIG_FILES,
    InferaError,
    ModelConfig,
    RepositoryModel,
    config_to_dict,
    effective_config,
    read_repository,
)


@dataclass
class ImportReport:
    """What an import did, line by line for the command's output."""

    registered: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def import_repository(
    path: Path | str,
    actor: Any = None,
    log: Callable[[str], None] = print,
    models: Collection[str] | None = None,
) -> ImportReport:
    """Register every model under `path` (only those of `models` when given); what was registered, skipped, failed."""
    root = Path(path)
    store = get_store()
    in_place = root.resolve() == store.root.resolve()
    report = ImportReport()
    for found in read_repository(root):
        if models is not None and found.name not in models:
            continue
        try:
            model_name_validator(found.name)
        except ValidationError as exc:
            report.skipped.append(f"{found.name}: {exc.messages[0]}")
            continue
        problem = found.problem or ensemble_graph.cycle_problem(found.name, [found.config])
        if problem:
            report.failed.append(f"{found.name}: {problem}")
            continue
        _import_model(root, found, store, in_place, actor, report)
    for line in report.registered:
        log(f"registered {line}")
    for line in report.skipped:
        log(f"skipped {line}")
    for line in report.failed:
        log(f"failed {line}")
    return report


def _import_model(
    root: Path, found: RepositoryModel, store: ModelStore, in_place: bool, actor: Any, report: ImportReport
) -> None:
    name = found.name
    with transaction.atomic():
        model, _ = RegisteredModel.objects.get_or_create(
            name=name,
            defaults={"created_by": actor_user(actor), "description": describe(found.config) or f"from '{root.name}'"},
        )
        known = set(model.versions.values_list("number", flat=True))
        if not in_place:
            _copy_config(root, store, name)
        added: list[ModelVersion] = []
        for number, folder in found.versions.items():
            if number in known:
                report.skipped.append(f"{name}/{number}: already registered")
                continue
            target = folder if in_place else _copy_version(store, folder, name, number)
            if target is None:
                report.skipped.append(f"{name}/{number}: the store already holds a different folder")
                continue
            added.append(_register_version(model, found.config, target, number, number in found.selected, store, actor))
            report.registered.append(f"{name}/{number}")
        loadable = [v for v in added if v.should_load]
        if model.active_version_id is None and loadable:
            model.active_version = max(loadable, key=lambda v: v.number)
            first = model.active_version.config
            model.backend, model.platform = first.get("backend", ""), first.get("platform", "")
            model.save(update_fields=["active_version", "backend", "platform"])
        if added:
            model_actions.record_import(actor, model, [v.number for v in added], root)


def _register_version(
    model: RegisteredModel,
    raw: ModelConfig | None,
    folder: Path,
    number: int,
    selected: bool,
    store: ModelStore,
    actor: Any,
) -> ModelVersion:
    sha256, size = folder_digest(folder)
    version = ModelVersion(
        model=model,
        number=number,
        artifact=store.relative(folder),
        sha256=sha256,
        size=size,
        uploaded_by=actor_user(actor),
        notes="imported",
    )
    try:
        version.config = config_to_dict(effective_config(model.name, folder, raw))
        version.should_load = selected
        version.state = VersionState.PENDING if selected else VersionState.UNLOADED
    except InferaError as exc:
        version.state, version.error = VersionState.FAILED, exc.message
    version.save()
    return version


def _copy_version(store: ModelStore, folder: Path, name: str, number: int) -> Path | None:
    """Copy a version folder into the store through staging; None when the store has that number already."""
    if store.version_dir(name, number).exists():
        return None
    staging = store.new_staging()
    try:
        shutil.copytree(folder, staging / "version", symlinks=False)
        return store.commit_version(staging / "version", name, number)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _copy_config(root: Path, store: ModelStore, name: str) -> None:
    """Bring the model's config file along, unless the store has one for it already."""
    target = store.model_dir(name)
    if any((target / file).is_file() for file in CONFIG_FILES):
        return
    for file in CONFIG_FILES:
        if (root / name / file).is_file():
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / name / file, target / file)
            return
