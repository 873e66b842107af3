"""The config editor's domain: an edited config checked against the active version, its differences from the
config that version serves with, and the two ways to save it.

Checking is the engine's own, at the serving server's door (`check_config`: parsing, the name, the code decision,
completion against the model file, validation, the server's limits), so the editor reports what a load would, in the
engine's words, which name the field; saving trial-loads with that check, not another. "Save as new version" is the
/v2 path's (new_versions.add_version_with_config: the active version's files with this config, trial-loaded, made
active); "apply to this version" trial-loads the edit on the version's own files, records it as that version's
config and lets the reconciler reload it (the old config serves until the new one is READY). Both are audited and
announced like every other change.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from console.audit.models import AuditEvent
from console.registry import ensemble_graph
from console.registry.models import ModelVersion, RegisteredModel
from console.registry.services import lookups, new_versions, notices, refusals
from console.registry.store import get_store
from engine.api import (
    Admissible,
    CodeRefused,
    InferaError,
    InferenceServer,
    InvalidArgument,
    ModelConfig,
    config_to_dict,
    config_to_pbtxt,
    parse_config_json,
    parse_config_pbtxt,
    replacing_override,
)

FORMATS = ("pbtxt", "json")
NEW_VERSION_NOTES = "config edited in the console"


@dataclass(frozen=True)
class CheckedEdit:
    """What the engine made of an edit: the effective config, or the errors, and how it differs from the current."""

    version: int
    errors: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None
    pbtxt: str = ""  # the effective config as config.pbtxt; when invalid, the edit's own text in that form
    changes: list[dict[str, Any]] = field(default_factory=list)  # {"field", "before", "after"}, a field a line
    diff: list[str] = field(default_factory=list)  # a unified diff of the config.pbtxt texts

    @property
    def valid(self) -> bool:
        return not self.errors


def edited_version(model: RegisteredModel) -> ModelVersion:
    """The version the editor edits: the active one, with files and a recorded config (409 otherwise)."""
    version = model.active_version
    if version is None or not version.artifact or not version.config:
        raise refusals.Conflict(f"model '{model.name}' has no active version whose config could be edited")
    version.model = model
    return version


def current_config(version: ModelVersion) -> dict[str, Any]:
    """The config the version serves with, in both forms the editor offers."""
    config = parse_config_json(version.config)
    return {
        "model": version.model.name,
        "version": version.number,
        "config": version.config,
        "pbtxt": config_to_pbtxt(config),
    }


def parse_edit(text: str, form: str) -> ModelConfig:
    """The edited text as a config (InvalidArgument naming the line and the field when it does not parse)."""
    if form == "json":
        return parse_config_json(text, source="config.json")
    return parse_config_pbtxt(text, source="config.pbtxt")


def check_edit(
    actor: Any, version: ModelVersion, text: str, form: str, server: InferenceServer | None = None
) -> CheckedEdit:
    """The engine's verdict on an edit of `version`'s config, with the differences when it passes."""
    return _verdict(actor, version, text, form, lookups.admitting(server))[0]


def _verdict(
    actor: Any, version: ModelVersion, text: str, form: str, door: InferenceServer
) -> tuple[CheckedEdit, Admissible | None]:
    """`check_edit`, and the edit's admissibility check when it passes (what saving it trial-loads)."""
    try:
        check = _checked(actor, version, text, form, door)
    except InferaError as exc:
        return CheckedEdit(version.number, errors=[exc.message], pbtxt=_as_pbtxt(text, form)), None
    before, after = parse_config_json(version.config), check.config
    edit = CheckedEdit(
        version.number,
        config=config_to_dict(after),
        pbtxt=config_to_pbtxt(after),
        changes=changes(version.config, config_to_dict(after)),
        diff=list(
            difflib.unified_diff(
                config_to_pbtxt(before).splitlines(),
                config_to_pbtxt(after).splitlines(),
                f"version {version.number}",
                "edited",
                lineterm="",
            )
        ),
    )
    return edit, check


def _as_pbtxt(text: str, form: str) -> str:
    """The edit as config.pbtxt text when it parses (so a form control can write it in either form), else ''."""
    try:
        return config_to_pbtxt(parse_edit(text, form))
    except InferaError:
        return ""


def _checked(actor: Any, version: ModelVersion, text: str, form: str, door: InferenceServer) -> Admissible:
    name = version.model.name
    check = door.check_config(
        name, get_store().absolute(version.artifact), parse_edit(text, form), caller=lookups.caller_of(actor)
    )
    if (cycle := ensemble_graph.cycle_problem(name, [check.config])) is not None:
        raise InvalidArgument(cycle)
    return check


def changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The values that differ, by path (`dynamic_batching.max_queue_delay_microseconds`, `input[0].dims`); a part
    added or removed whole (`instance_group[0]`, `dynamic_batching`) is one change, None on the side it is missing."""
    found: list[dict[str, Any]] = []
    _compare(before, after, "", found)
    return found


def _compare(before: Any, after: Any, path: str, found: list[dict[str, Any]]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        # by name: the stored config's key order is the database's (PostgreSQL's jsonb reorders keys)
        for key in sorted(before.keys() | after.keys()):
            _compare(before.get(key), after.get(key), f"{path}.{key}" if path else key, found)
    elif isinstance(before, list) and isinstance(after, list) and _nested(before + after):
        for index in range(max(len(before), len(after))):
            old = before[index] if index < len(before) else None
            new = after[index] if index < len(after) else None
            _compare(old, new, f"{path}[{index}]", found)
    elif before != after:
        found.append({"field": path, "before": before, "after": after})


def _nested(values: list[Any]) -> bool:
    return any(isinstance(value, (dict, list)) for value in values)


def save_as_new_version(
    actor: Any,
    model: RegisteredModel,
    text: str,
    form: str,
    notes: str = "",
    server: InferenceServer | None = None,
) -> ModelVersion:
    """The active version's files with the edited config, as a new version made active once it loads (audited).

    `server` admits it (lookups.admitting), with the check the editor made of it."""
    door = lookups.admitting(server)
    version, checked, check = _checked_change(actor, model, text, form, "save", door)
    override = replacing_override(parse_config_json(checked.config))  # a field the edit removed is removed
    added = new_versions.add_version_with_config(
        actor, model, override, notes=notes or NEW_VERSION_NOTES, server=door, checked=check
    )
    AuditEvent.record(actor, "config.edit", added.label, source=version.number, changes=checked.changes)
    return added


def apply_to_version(
    actor: Any, model: RegisteredModel, text: str, form: str, server: InferenceServer | None = None
) -> ModelVersion:
    """The edited config for the active version itself, trial-loaded first by `server` (lookups.admitting) with
    the check the editor made of it; the reconciler reloads the version and the old config serves until the new
    one is READY."""
    door = lookups.admitting(server)
    version, checked, check = _checked_change(actor, model, text, form, "apply", door)
    try:
        effective = door.admit_blocking(
            model.name, get_store().absolute(version.artifact), caller=check.caller, checked=check
        )
    except CodeRefused as exc:
        raise refusals.RegistryError(exc.message, 403) from None
    except InferaError as exc:
        raise refusals.RegistryError(f"the edited config failed its trial load: {exc.message}") from None
    with transaction.atomic():
        version = ModelVersion.objects.select_for_update().select_related("model").get(pk=version.pk)
        version.reconfigure(config_to_dict(effective))
        if version.is_active:
            get_store().write_config(model.name, effective)
        AuditEvent.record(actor, "version.config", version.label, changes=checked.changes)
        notices.notify_changed(model.name)
    return version


def _checked_change(
    actor: Any, model: RegisteredModel, text: str, form: str, doing: str, door: InferenceServer
) -> tuple[ModelVersion, CheckedEdit, Admissible]:
    """The edited version, the engine's verdict on an edit someone wants to `doing` (save, apply) and its check:
    refused with 403 for a caller who may not change models, 400 with the engine's message, or when nothing
    changed."""
    version = edited_version(model)
    caller = lookups.caller_of(actor)
    if not caller.may_change_models:
        raise refusals.RegistryError(f"'{caller.name}' may not change the config of model '{model.name}'", 403)
    checked, check = _verdict(actor, version, text, form, door)
    if check is None:
        raise refusals.RegistryError(checked.errors[0])
    if not checked.changes:
        raise refusals.RegistryError(f"the config is the one version {version.number} serves with: nothing to {doing}")
    return version, checked, check
