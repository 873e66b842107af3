"""Domain actions on the registry: each changes the desired state, writes an audit event and tells the reconciler.

Views, the v2 repository control, the importer and management commands call these and nothing else; they alone
write audit events and change notices. Each is one transaction, and the "registry.changed" message goes out only
after it commits, so a reconciler never reads half a change. Whether a version may enter at all (who asks, whether
it runs code, a trial load) is the engine's decision, made at the serving process's server (`admitting`), the one
door of every entry, checked once per version; `actor` is a user, a Principal or a name.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Q

from console.accounts.principals import principal_for
from console.outages import is_storage_full
from console.registry import ensemble_graph, pipeline, uploads
from console.registry.models import (
    AuditEvent,
    ModelVersion,
    RegisteredModel,
    VersionState,
    actor_user,
    model_name_validator,
)
from console.registry.store import get_store
from engine.api import (
    SYSTEM,
    Admissible,
    CodeRefused,
    InferaError,
    InferenceServer,
    ModelConfig,
    Principal,
    TrafficPolicy,
    check_traffic_policy,
    config_to_dict,
    merge_config,
    parse_config_json,
    policy_from_dict,
)

logger = logging.getLogger("console.registry")

GROUP = "registry"
CHANGED = "registry.changed"


class RegistryError(Exception):
    """A refused registry action; `status` is the HTTP answer and the message names the problem."""

    status = 400

    def __init__(self, message: str, status: int | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.extra = extra


class NotFound(RegistryError):
    status = 404


class Conflict(RegistryError):
    status = 409


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


def notify_changed(name: str) -> None:
    """After the current transaction commits, wake every reconciler (every replica on a Redis channel layer)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(GROUP, {"type": CHANGED, "model": name})
        except Exception as exc:  # the periodic pass heals a lost message; the change itself is committed
            logger.warning("could not announce the change of model '%s' (%s: %s)", name, type(exc).__name__, exc)

    transaction.on_commit(send)


# ---- lookups


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


# ---- models


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


def update_model(actor: Any, model: RegisteredModel, description: str) -> RegisteredModel:
    with transaction.atomic():
        before = model.description
        model.description = description
        model.save(update_fields=["description"])
        AuditEvent.record(actor, "model.update", model.name, description={"from": before, "to": description})
    return model


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


def in_use(subject: str, ensembles: list[str]) -> Conflict:
    """The refusal to remove what registered ensembles call, naming them (the API also lists them)."""
    named = ", ".join(f"'{name}'" for name in ensembles)
    which = f"the ensemble {named}" if len(ensembles) == 1 else f"the ensembles {named}"
    return Conflict(
        f"{subject} is used by {which}: change or delete {'it' if len(ensembles) == 1 else 'them'} first",
        ensembles=ensembles,
    )


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


# ---- versions


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
    base_config = _model_config(model)
    store = get_store()
    try:
        if file is None:
            staged = uploads.stage_without_file(store, config, base_config)
        else:
            staged = uploads.stage_upload(
                store, file, config, model.name, lambda name: base_config if name == model.name else _config_named(name)
            )
    except uploads.UploadRejected as exc:
        raise RegistryError(exc.message, exc.status) from None
    try:
        caller = caller_of(actor)
        parts = {**staged.companions, model.name: staged}
        configs = {
            name: part.config if part.config is not None else base_config if part is staged else _config_named(name)
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


def _config_named(name: str) -> ModelConfig | None:
    """The config new versions of the model `name` start from; None when it is not registered."""
    model = RegisteredModel.objects.select_related("active_version").filter(name=name).first()
    return _model_config(model) if model is not None else None


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
        base_config = _model_config(model)
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
        model = _locked(version.model)
        _switch_active(actor, model, version)
        notify_changed(model.name)
    version.model = model
    return version


def _locked(model: RegisteredModel) -> RegisteredModel:
    """The model's row, locked for the rest of the transaction, with its active version."""
    return RegisteredModel.objects.select_for_update(of=("self",)).select_related("active_version").get(pk=model.pk)


def _switch_active(actor: Any, model: RegisteredModel, version: ModelVersion) -> None:
    """Within a transaction: `version` takes unversioned traffic, its config is the store's, and it is audited."""
    previous = model.active_number
    model.active_version = version
    model.save(update_fields=["active_version"])
    get_store().write_config(model.name, parse_config_json(version.config))
    AuditEvent.record(actor, "version.activate", version.label, previous=previous)


def load_version(actor: Any, version: ModelVersion) -> ModelVersion:
    """Ask for a version to be loaded (again: a FAILED one is retried)."""
    if not version.artifact:
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
    _check_out_of_traffic(version, "unloading")
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
    _check_out_of_traffic(version, "deleting")
    name, number = version.model.name, version.number
    if ensembles := ensembles_using(name, number):
        raise in_use(f"version {number} of '{name}'", ensembles)
    with transaction.atomic():
        version.delete()
        AuditEvent.record(actor, "version.delete", f"{name}/{number}", sha256=version.sha256)
        transaction.on_commit(lambda: get_store().delete_version(name, number))
        notify_changed(name)


def _model_config(model: RegisteredModel) -> ModelConfig | None:
    """The config new versions of `model` start from: its active version's, else the store's file."""
    if model.active_version_id and model.active_version.config:
        return parse_config_json(model.active_version.config)
    try:
        return get_store().read_config(model.name)
    except Exception:  # an unreadable file is reported by the trial load, not here
        return None


# ---- /v2 repository control and imports: the same door


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


def record_import(actor: Any, model: RegisteredModel, numbers: list[int], source: Path) -> None:
    """Audit and announce versions registered from an existing repository (the importer's one write of both)."""
    AuditEvent.record(actor, "repository.import", model.name, source=source.name, versions=numbers)
    notify_changed(model.name)


# ---- traffic policies: how the requests that name no version are shared among a model's versions

ACTIVE_POLICY = TrafficPolicy().to_dict()


def traffic_policy_of(model: RegisteredModel) -> TrafficPolicy:
    """The model's desired traffic policy (every request to the active version when none was set, or when the one
    stored is out of today's ranges: the engine refuses to put it in force)."""
    try:
        return policy_from_dict(model.traffic_policy or {})
    except InferaError as exc:
        logger.warning("model '%s': its stored traffic policy is refused: %s", model.name, exc.message)
        return TrafficPolicy()


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
        model = _locked(model)
        ready = set(model.versions.filter(state=VersionState.READY).values_list("number", flat=True))
        try:
            decoupled = bool((model.shown_config.get("model_transaction_policy") or {}).get("decoupled"))
            check_traffic_policy(model.name, policy, ready, model.active_number, decoupled=decoupled)
        except InferaError as exc:
            raise RegistryError(exc.message) from None
        _write_traffic(actor, model, policy.to_dict(), "traffic.set")
    return model


def promote_traffic(actor: Any, model: RegisteredModel) -> RegisteredModel:
    """The policy's candidate becomes the active version and every request goes to it: for a canary the version
    with the highest weight that is not active, for a shadow its candidate."""
    _check_may_change_traffic(actor, model)
    with transaction.atomic():
        model = _locked(model)
        policy = traffic_policy_of(model)
        number = promotion_candidate(policy, model.active_number)
        if number is None:
            raise Conflict(f"model '{model.name}' has no canary or shadow candidate to promote")
        version = model.versions.filter(number=number).first()
        if version is None or version.state != VersionState.READY:
            state = version.state if version is not None else "gone"
            raise Conflict(f"version {number} of '{model.name}' is {state}; only a READY version can be promoted")
        previous = model.active_number
        _switch_active(actor, model, version)
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
        model = _locked(model)
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


def _check_out_of_traffic(version: ModelVersion, doing: str) -> None:
    """Refuse to unload or delete a version that the model's traffic policy sends requests to."""
    policy = traffic_policy_of(version.model)
    if version.number in policy.versions():
        raise Conflict(
            f"version {version.number} of model '{version.model.name}' is in its {policy.mode} traffic policy; "
            f"change the policy before {doing} it"
        )
