"""New versions: uploads (one model or an archive of several), /v2 loads with files or a config; each
checked and trial-loaded by the engine's one door, then stored, recorded and announced."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from console.audit.models import AuditEvent, actor_user
from console.outages import is_storage_full
from console.registry import uploads
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services.lookups import admitting, caller_of, check_no_cycle, config_named, model_config
from console.registry.services.model_actions import register_model
from console.registry.services.notices import notify_changed
from console.registry.services.refusals import Conflict, RegistryError
from console.registry.store import get_store
from engine.api import (
    Admissible,
    CodeRefused,
    InferaError,
    InferenceServer,
    ModelConfig,
    Principal,
    config_to_dict,
    merge_config,
)


@dataclass(frozen=True)
class Uploaded:
    """What one upload added: the version of the model it was for, and those of the other model folders it held."""

    version: ModelVersion
    companions: list[ModelVersion] = field(default_factory=list)


def add_version(
    actor: Any,
    model: RegisteredModel,
    file: UploadedFile | None,
    *,
    config: ModelConfig | None = None,
    notes: str = "",
    activate: bool = False,
    server: InferenceServer | None = None,
) -> ModelVersion:
    """Check, trial-load and store a new version; raises RegistryError, with the FAILED version when one was kept.

    The first version of a model becomes its active one. `activate` makes this one active as soon as it loads.
    """
    return upload_versions(actor, model, file, config=config, notes=notes, activate=activate, server=server).version


def upload_versions(
    actor: Any,
    model: RegisteredModel,
    file: UploadedFile | None,
    *,
    config: ModelConfig | None = None,
    notes: str = "",
    activate: bool = False,
    server: InferenceServer | None = None,
) -> Uploaded:
    """A new version of `model` (see add_version), and one of each other model folder when `file` is an archive of
    several, added first (registering the models that are new) with the same notes and `activate`.

    With no file, the config (sent, else the current one) must be an ensemble's: its version folder stays empty.
    Nothing is recorded when the request itself is refused or any of its versions runs code its caller may not
    load; a version that fails its trial load stops the upload there (those added before it stay). `server` admits
    (see `admitting`).
    """
    with _room_in_store():
        return _upload_versions(
            actor, model, file, config=config, notes=notes, activate=activate, door=admitting(server)
        )


def _upload_versions(
    actor: Any,
    model: RegisteredModel,
    file: UploadedFile | None,
    *,
    config: ModelConfig | None,
    notes: str,
    activate: bool,
    door: InferenceServer,
) -> Uploaded:
    base_config = model_config(model)
    store = get_store()
    try:
        if file is None:
            staged = uploads.stage_without_file(store, config, base_config)
        else:
            staged = uploads.stage_upload(
                store, file, config, model.name, lambda name: base_config if name == model.name else config_named(name)
            )
    except uploads.UploadRejected as exc:
        raise RegistryError(exc.message, exc.status) from None
    try:
        caller = caller_of(actor)
        parts = {**staged.companions, model.name: staged}
        configs = {
            name: part.config if part.config is not None else base_config if part is staged else config_named(name)
            for name, part in parts.items()
        }
        checks = {name: _check(door, name, part, configs[name], caller) for name, part in parts.items()}
        for name, config in configs.items():
            check_no_cycle(name, [config], arriving=configs)
        companions = _add_companions(actor, staged.companions, checks, door, notes=notes, activate=activate)
        version = _admit_staged(actor, model, staged, checks[model.name], door, notes=notes, activate=activate)
        return Uploaded(version, companions)
    finally:
        staged.cleanup()


def _add_companions(
    actor: Any,
    parts: dict[str, uploads.StagedUpload],
    checks: dict[str, Admissible | InferaError],
    door: InferenceServer,
    *,
    notes: str,
    activate: bool,
) -> list[ModelVersion]:
    """The other model folders of an archive, each a new version (of a model registered now when new), admitted
    with its check (`checks`, by name); the models an ensemble calls come before it."""
    added: list[ModelVersion] = []
    for name in sorted(parts, key=lambda name: (uploads.is_ensemble(parts[name].config), name)):
        model = RegisteredModel.objects.select_related("active_version").filter(name=name).first()
        if model is None:
            model = register_model(actor, name, description="uploaded with an archive of several models")
        try:
            added.append(_admit_staged(actor, model, parts[name], checks[name], door, notes=notes, activate=activate))
        except RegistryError as exc:
            before = f" (added before it: {', '.join(v.label for v in added)})" if added else ""
            raise RegistryError(f"model folder '{name}': {exc.message}{before}", exc.status, **exc.extra) from None
    return added


def add_version_from_files(
    actor: Any,
    model: RegisteredModel,
    files: dict[PurePosixPath, bytes],
    override: dict | None,
    server: InferenceServer | None = None,
) -> ModelVersion:
    """A /v2 repository load with files for a registered model: a new version (audited), made active.

    The files are one version folder of Triton's `file:<version>/<name>` layout (the version number names the
    folder only; the registry numbers versions itself). `override` is the load's `config` parameter.
    """
    folders = {path.parts[0] for path in files}
    if len(folders) != 1 or not next(iter(folders)).isdigit() or any(len(path.parts) < 2 for path in files):
        raise RegistryError(
            f"a load with files for the registered model '{model.name}' must send one version folder "
            "(file:<version>/<name>), got " + ", ".join(sorted(str(p) for p in files))
        )

    def write(version_dir: Path) -> None:
        for path, content in files.items():
            target = version_dir.joinpath(*path.parts[1:])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)

    return _new_active_version(actor, model, write, override, notes="loaded through /v2", door=admitting(server))


def add_version_with_config(
    actor: Any,
    model: RegisteredModel,
    override: dict,
    notes: str = "config changed through /v2",
    *,
    server: InferenceServer | None = None,
    checked: Admissible | None = None,
) -> ModelVersion:
    """A /v2 repository load with a config for a registered model (or the console's config editor and analyzer): its
    active files with that config, as a new version (audited) made active, so the old version and its config stay
    for a rollback. `checked` is the config's whole check (admissibility and ensemble cycles) when the caller made
    it (the config editor)."""
    active = model.active_version
    if active is None or not active.artifact:
        raise Conflict(f"model '{model.name}' has no active version whose files a new config could use")
    source = get_store().absolute(active.artifact)

    def copy(version_dir: Path) -> None:
        shutil.copytree(source, version_dir, symlinks=False)

    return _new_active_version(actor, model, copy, override, notes=notes, door=admitting(server), checked=checked)


def _new_active_version(
    actor: Any,
    model: RegisteredModel,
    fill: Callable[[Path], None],
    override: dict | None,
    notes: str,
    *,
    door: InferenceServer,
    checked: Admissible | None = None,
) -> ModelVersion:
    """A version folder made in staging by `fill`, with the model's config and `override`, checked (unless `checked`
    is its check already), admitted and activated."""
    with _room_in_store():
        root = get_store().new_staging()
    try:
        version_dir = root / uploads.STAGED_VERSION
        with _room_in_store():
            fill(version_dir)
        staged = uploads.staged_folder(root, version_dir)
        base_config = model_config(model)
        staged.config = _merged(model.name, base_config, override)
        check = checked
        if check is None:  # the config editor's check was the whole one: the ensemble cycles included
            raw = staged.config if staged.config is not None else base_config
            check = _check(door, model.name, staged, raw, caller_of(actor))
            check_no_cycle(model.name, [raw])
        return _admit_staged(actor, model, staged, check, door, notes=notes, activate=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _merged(name: str, base: ModelConfig | None, override: dict | None) -> ModelConfig | None:
    if not override:
        return base
    try:
        return merge_config(base or ModelConfig(name=name), override, source=f"model '{name}': config override")
    except InferaError as exc:
        raise RegistryError(exc.message) from None


def _admit_staged(
    actor: Any,
    model: RegisteredModel,
    staged: uploads.StagedUpload,
    check: Admissible | InferaError,
    door: InferenceServer,
    *,
    notes: str,
    activate: bool,
) -> ModelVersion:
    """The engine's admission of a staged version folder whose `check` was made (`_check`), recorded: FAILED with
    the reason, or trial-loaded by `door` and stored."""
    store = get_store()
    with transaction.atomic():
        number = (
            RegisteredModel.objects.select_for_update()
            .get(pk=model.pk)
            .next_version_number(store.version_numbers(model.name))
        )
        version = ModelVersion.objects.create(
            model=model,
            number=number,
            sha256=staged.sha256,
            size=staged.size,
            notes=notes,
            uploaded_by=actor_user(actor),
            state=VersionState.PENDING,
        )
    staged.assign_number(model.name, number)
    if isinstance(check, InferaError):
        return _fail_upload(actor, version, check.message, staged)
    try:
        effective = door.admit_blocking(model.name, staged.version_dir, caller=check.caller, checked=check)
    except CodeRefused as exc:
        version.delete()
        raise RegistryError(f"upload refused: {exc.message}", 403) from None
    except InferaError as exc:
        return _fail_upload(actor, version, exc.message, staged)
    return _store_version(actor, model, version, staged, effective, activate)


def _check(
    door: InferenceServer, name: str, staged: uploads.StagedUpload, raw: ModelConfig | None, caller: Principal
) -> Admissible | InferaError:
    """The version's admissibility check, made once, before anything about it is recorded: refused (403) when it
    runs code its caller may not load; what is wrong with the version itself is returned, for its FAILED record."""
    try:
        return door.check_admissible(name, staged.version_dir, raw, caller=caller)
    except CodeRefused as exc:
        raise RegistryError(f"upload refused: {exc.message}", 403) from None
    except InferaError as exc:
        return exc


def _fail_upload(actor: Any, version: ModelVersion, reason: str, staged: uploads.StagedUpload) -> ModelVersion:
    with transaction.atomic():
        version.fail(reason)
        AuditEvent.record(
            actor, "version.upload", version.label, state="FAILED", error=reason, sha256=staged.sha256, size=staged.size
        )
    raise RegistryError(
        f"version {version.number} of '{version.model.name}' failed its trial load: {reason}", 400, version=version
    )


def _store_version(
    actor: Any,
    model: RegisteredModel,
    version: ModelVersion,
    staged: uploads.StagedUpload,
    effective: ModelConfig,
    activate: bool,
) -> ModelVersion:
    store = get_store()
    path = store.commit_version(staged.version_dir, model.name, version.number, config=effective)
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.select_for_update().get(pk=model.pk)
            version.artifact = store.relative(path)
            version.config = config_to_dict(effective)
            version.should_load = True
            version.save(update_fields=["artifact", "config", "should_load", "state_changed_at"])
            first = model.active_version_id is None
            previous = model.active_number
            model.backend = model.backend or effective.backend
            model.platform = model.platform or effective.platform
            if first or activate:
                model.active_version = version
                store.write_config(model.name, effective)
            model.save(update_fields=["backend", "platform", "active_version"])
            detail: dict[str, Any] = {"sha256": version.sha256, "size": version.size, "notes": version.notes}
            if staged.notes:
                detail["warnings"] = staged.notes
            AuditEvent.record(actor, "version.upload", version.label, **detail)
            if first or activate:
                AuditEvent.record(actor, "version.activate", version.label, previous=previous)
            notify_changed(model.name)
    except OSError as exc:
        if is_storage_full(exc):  # the config could not be written: nothing of this version may remain
            store.delete_version(model.name, version.number)
            version.delete()
        raise
    version.model = model
    return version


@contextlib.contextmanager
def _room_in_store() -> Iterator[None]:
    """A write into the model store that finds no room left is the uploader's 507 saying so, not a 500."""
    try:
        yield
    except OSError as exc:
        if not is_storage_full(exc):
            raise
        raise RegistryError(get_store().no_room(exc), 507) from None
