"""Triton's v2 repository load/unload as changes of the registry's desired state.

When the console serves the engine, `POST /v2/repository/models/<m>/load` and `.../unload` for a registered model go
through the registry's services like the console's buttons, then wait for the reconciler to act on them, so a later
restart or replica comes back to what v2 asked for. A load that sends files, or a config, for a registered model
becomes a new version in the registry (audited, trial-loaded, made active), never a silent replacement. Models the
registry does not know are left to the engine (`False`). The caller has already been allowed to change models by
the front end; whether the load may run code is the engine's decision, made in services at this server's door.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from channels.db import database_sync_to_async

from console.outages import database_needed
from console.registry.services import lookups, new_versions, refusals, v2_actions
from engine.api import Forbidden, InferaError, InferenceServer, InvalidArgument, LoadError, Principal

if TYPE_CHECKING:
    from console.registry.reconciler import Reconciler


class StoreFull(InferaError):
    """The model store has no room for the files a load sent (HTTP 507 Insufficient Storage)."""

    status = 507


class RegistryRepositoryControl:
    """The engine's RepositoryControl backed by the registry."""

    def __init__(self, reconciler: Reconciler) -> None:
        self.reconciler = reconciler

    async def load(
        self,
        name: str,
        *,
        config: dict[str, Any] | None,
        files: dict[PurePosixPath, bytes] | None,
        caller: Principal,
    ) -> bool:
        """Serve the model's active version, or a new version made of the sent files or config; LoadError on failure."""
        with database_needed(f"load model '{name}'"):
            if files or config:
                handled = await database_sync_to_async(_new_version)(
                    caller, name, files, config, self.reconciler.server
                )
                if not handled:
                    return False
            else:
                wanted = await database_sync_to_async(v2_actions.v2_load)(caller, name)
                if wanted is None:
                    return False
            await self.reconciler.reconcile_model(name)
            numbers = await database_sync_to_async(_wanted_numbers)(name)
            failure = await database_sync_to_async(v2_actions.failures_of)(name, numbers, self.reconciler.replica)
            if failure:
                raise LoadError(failure, model=name)
            return True

    async def unload(self, name: str, *, caller: Principal) -> bool:
        """Mark every version of the model not to load, and unload it."""
        with database_needed(f"unload model '{name}'"):
            if not await database_sync_to_async(v2_actions.v2_unload)(caller, name):
                return False
            await self.reconciler.reconcile_model(name)
            return True


def _new_version(
    caller: Principal,
    name: str,
    files: dict[PurePosixPath, bytes] | None,
    config: dict[str, Any] | None,
    server: InferenceServer | None = None,
) -> bool:
    """Register the sent files or config as a new active version, admitted by the engine that serves it; False when
    the model is not registered."""
    try:
        model = lookups.get_model(name)
    except refusals.NotFound:
        return False
    try:
        if files:
            new_versions.add_version_from_files(caller, model, files, config, server=server)
        else:
            new_versions.add_version_with_config(caller, model, config or {}, server=server)
    except refusals.RegistryError as exc:
        if exc.status == 403:
            raise Forbidden(exc.message) from None
        if exc.status == 507:
            raise StoreFull(f"failed to load '{name}': {exc.message}") from None
        version = exc.extra.get("version")
        if version is not None:
            raise LoadError(exc.message, model=name) from None
        raise InvalidArgument(f"failed to load '{name}': {exc.message}") from None
    return True


def _wanted_numbers(name: str) -> list[int]:
    return list(lookups.get_model(name).versions.filter(should_load=True).values_list("number", flat=True))
