"""Domain actions on the registry: each changes the desired state, writes an audit event and tells the reconciler.

Views, the v2 hooks and management commands call these and nothing else; each is one transaction, and the
"registry.changed" message goes out only after it commits, so a reconciler never reads half a change.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction

from console.accounts.permissions import python_models_refusal
from console.registry import uploads
from console.registry.models import AuditEvent, ModelVersion, RegisteredModel, VersionState, model_name_validator
from console.registry.store import get_store
from engine.config import ModelConfig
from engine.config_format import config_to_dict, parse_config_json

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


def notify_changed(name: str) -> None:
    """After the current transaction commits, wake every reconciler (every replica on a Redis channel layer)."""

    def send() -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(GROUP, {"type": CHANGED, "model": name})
        except Exception:  # the periodic pass heals a lost message; the change itself is committed
            logger.warning("could not announce the change of model '%s'", name, exc_info=True)

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
    try:
        with transaction.atomic():
            model = RegisteredModel.objects.create(
                name=name, description=description, backend=backend, platform=platform, created_by=_user(actor)
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


def delete_model(actor: Any, model: RegisteredModel) -> None:
    """Forget the model and remove its folder from the store; the reconciler unloads it from the engine."""
    name = model.name
    with transaction.atomic():
        numbers = list(model.versions.values_list("number", flat=True))
        RegisteredModel.objects.filter(pk=model.pk).update(active_version=None)
        model.delete()
        AuditEvent.record(actor, "model.delete", name, versions=numbers)
        transaction.on_commit(lambda: get_store().delete_model(name))
        notify_changed(name)


# ---- versions


def add_version(
    actor: Any,
    model: RegisteredModel,
    file: UploadedFile,
    *,
    config: ModelConfig | None = None,
    notes: str = "",
    activate: bool = False,
) -> ModelVersion:
    """Check, trial-load and store a new version; raises RegistryError, with the FAILED version when one was kept.

    The first version of a model becomes its active one. `activate` makes this one active as soon as it loads.
    """
    store = get_store()
    base_config = _model_config(model)
    try:
        staged = uploads.stage_upload(store, file, config, base_config)
    except uploads.UploadRejected as exc:
        raise RegistryError(exc.message, exc.status) from None
    try:
        if staged.is_python:
            refusal = python_models_refusal(actor)
            if refusal:
                raise RegistryError(f"upload refused: {refusal}", 403)
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
                uploaded_by=_user(actor),
                state=VersionState.PENDING,
            )
        staged.assign_number(model.name, number)
        try:
            effective = uploads.check_version(model.name, staged, base_config)
        except uploads.TrialFailed as exc:
            return _fail_upload(actor, version, str(exc), staged)
        return _store_version(actor, model, version, staged, effective, activate)
    finally:
        staged.cleanup()


def _fail_upload(actor: Any, version: ModelVersion, reason: str, staged: uploads.StagedUpload) -> ModelVersion:
    with transaction.atomic():
        version.state = VersionState.FAILED
        version.error = reason
        version.save(update_fields=["state", "error", "state_changed_at"])
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
    path = store.commit_version(staged.version_dir, model.name, version.number)
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
    version.model = model
    return version


def activate(actor: Any, version: ModelVersion) -> ModelVersion:
    """Make a READY version the one that takes unversioned traffic (roll forward or back)."""
    if version.state != VersionState.READY:
        raise Conflict(
            f"version {version.number} of '{version.model.name}' is {version.state}; only a READY version can be "
            "activated" + (" (load it first)" if version.state == VersionState.UNLOADED else "")
        )
    with transaction.atomic():
        model = (
            RegisteredModel.objects.select_for_update(of=("self",))
            .select_related("active_version")
            .get(pk=version.model_id)
        )
        previous = model.active_number
        model.active_version = version
        model.save(update_fields=["active_version"])
        get_store().write_config(model.name, parse_config_json(version.config))
        AuditEvent.record(actor, "version.activate", version.label, previous=previous)
        notify_changed(model.name)
    version.model = model
    return version


def load_version(actor: Any, version: ModelVersion) -> ModelVersion:
    """Ask for a version to be loaded (again: a FAILED one is retried)."""
    if not version.artifact:
        raise Conflict(f"version {version.number} of '{version.model.name}' has no files in the store to load")
    with transaction.atomic():
        version.should_load = True
        if version.state in (VersionState.FAILED, VersionState.UNLOADED):
            version.state = VersionState.PENDING
            version.error = ""
        version.save(update_fields=["should_load", "state", "error", "state_changed_at"])
        AuditEvent.record(actor, "version.load", version.label)
        notify_changed(version.model.name)
    return version


def unload_version(actor: Any, version: ModelVersion) -> ModelVersion:
    """Ask for a version to be unloaded; the active one stays until another is activated."""
    if version.is_active:
        raise Conflict(
            f"version {version.number} is the active version of '{version.model.name}'; activate another version "
            "before unloading it"
        )
    with transaction.atomic():
        version.should_load = False
        version.save(update_fields=["should_load", "state_changed_at"])
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
    name, number = version.model.name, version.number
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


def _user(actor: Any) -> Any:
    return actor if getattr(actor, "is_authenticated", False) else None
