"""Triton's v2 repository load/unload as changes of the registry's desired state.

When the console serves the engine, `POST /v2/repository/models/<m>/load` and `.../unload` for a registered
model change the same state the console's buttons change, then wait for the reconciler to act on it, so a
later restart or replica comes back to what v2 asked for. Each hook returns True when it handled the request
and False when the engine's own handling applies (models the registry does not know, and loads that carry a
config override or files, which are ad-hoc by nature).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async
from django.db import transaction

from console import engine_link
from console.registry.models import AuditEvent, RegisteredModel, VersionState
from console.registry.reconciler import reconcile_model
from console.registry.services import notify_changed
from console.registry.v2_access import V2_ACTOR, authorize_change, carries_code
from engine.errors import LoadError

if TYPE_CHECKING:
    from engine.server import InferenceServer


async def on_v2_load(
    name: str,
    *,
    config: Any = None,
    files: dict[str, bytes] | None = None,
    server: InferenceServer | None = None,
    actor: str = V2_ACTOR,
) -> bool:
    """Mark the model's active version (or its newest usable one) to load, and load it; LoadError on failure."""
    if config or files:
        return False
    wanted = await database_sync_to_async(_want_loaded)(name, actor)
    if wanted is None:
        return False
    await reconcile_model(server or engine_link.get_server(), name)
    failure = await database_sync_to_async(_failure_of)(name, wanted)
    if failure:
        raise LoadError(f"failed to load '{name}': {failure}")
    return True


async def on_v2_unload(name: str, *, server: InferenceServer | None = None, actor: str = V2_ACTOR) -> bool:
    """Mark every version of the model not to load, and unload it."""
    handled = await database_sync_to_async(_want_unloaded)(name, actor)
    if not handled:
        return False
    await reconcile_model(server or engine_link.get_server(), name)
    return True


def _want_loaded(name: str, actor: str) -> list[int] | None:
    """The version numbers that will load, or None when the model is not registered."""
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
            version.should_load = True
            if version.state in (VersionState.FAILED, VersionState.UNLOADED):
                version.state, version.error = VersionState.PENDING, ""  # as Triton: a load retries
            version.save(update_fields=["should_load", "state", "error", "state_changed_at"])
        AuditEvent.record(actor, "v2.load", name, versions=[v.number for v in chosen])
        notify_changed(name)
    return [v.number for v in chosen]


def _want_unloaded(name: str, actor: str) -> bool:
    with transaction.atomic():
        model = RegisteredModel.objects.filter(name=name).first()
        if model is None:
            return False
        model.versions.update(should_load=False)
        AuditEvent.record(actor, "v2.unload", name)
        notify_changed(name)
    return True


def _failure_of(name: str, numbers: list[int]) -> str:
    """The reasons of the asked-for versions that failed, joined; empty when none did."""
    if not numbers:
        return "no version of it has files in the model store"
    failed = RegisteredModel.objects.get(name=name).versions.filter(number__in=numbers, state=VersionState.FAILED)
    return "; ".join(f"version {v.number}: {v.error}" for v in failed)


class RegistryRepositoryControl:
    """The engine's RepositoryControl backed by the registry: v2 load/unload change the console's desired state.

    The caller is checked first (v2_access): an inference or viewer token may not change models, and only admins
    may load code.
    """

    async def load(
        self, name: str, *, config: Any = None, files: dict[str, bytes] | None = None, scope: Any = None
    ) -> bool:
        caller = await authorize_change(scope, name, code=carries_code(config, files))
        return await on_v2_load(name, config=config, files=files, actor=caller.actor)

    async def unload(self, name: str, *, scope: Any = None) -> bool:
        caller = await authorize_change(scope, name)
        return await on_v2_unload(name, actor=caller.actor)
