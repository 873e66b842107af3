"""Repository load and unload as both front ends take them (HTTP handlers.py, gRPC grpc_management.py).

One parser for a load's parameters, so HTTP and gRPC accept and refuse the same things in the same words: Triton's
`config` (a JSON string; HTTP's JSON body may also carry it as an object, which a gRPC parameter cannot hold; a
parameter without a value is refused, as Triton refuses one that is not a string) and `file:<path>` contents
(bytes, or base64 text), their paths normalised and checked before anyone writes a byte. Unknown parameters are
ignored. The registry's repository control (the console) is asked first, else the engine loads by itself.

Under model control mode none or poll (engine/environment/model_control.py) both are refused once parsed (as Triton),
with Triton's text and code (UNAVAILABLE: 503, gRPC UNAVAILABLE), as its model repository manager refuses them
whenever explicit model control is off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol

from engine.config.names import check_model_name, normalise_files, sent_files
from engine.environment.model_control import ModelControl
from engine.errors import InvalidArgument, Unavailable
from engine.serving.admission import Principal
from engine.serving.server import config_override

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer


class RepositoryControl(Protocol):
    """Who owns the desired state of models (the console's registry): repository load/unload go there first.

    Each returns True when it handled the request, False to let the engine load or unload by itself. `files`
    are already normalised (engine.config.names); `caller` is who asked, already allowed to change models.
    """

    async def load(
        self,
        name: str,
        *,
        config: dict[str, Any] | None,
        files: dict[PurePosixPath, bytes] | None,
        caller: Principal,
    ) -> bool: ...

    async def unload(self, name: str, *, caller: Principal) -> bool: ...


# Triton's words (core src/model_repository_manager.cc, LoadUnloadModel) whenever explicit model control is off
CONTROL_REFUSED = "explicit model load / unload is not allowed if polling is enabled"


def check_repository_control(control: ModelControl) -> None:
    """Unavailable with Triton's message unless the model control mode takes repository load and unload."""
    if not control.repository_control_open:
        raise Unavailable(
            f"{CONTROL_REFUSED}: this server runs with model control mode '{control.mode}' "
            "(INFERA_MODEL_CONTROL_MODE); the console's registry decides which models serve"
        )


def check_load_name(name: object) -> str:
    """The model name of a repository load or unload; an invalid one is refused as any model name is, after
    Triton's words where it has some (core model_repository_manager.cc, ValidateModelName: empty, a path)."""
    try:
        return check_model_name(name)
    except InvalidArgument as exc:
        trimmed = name.strip() if isinstance(name, str) else None
        if trimmed == "":
            raise InvalidArgument(
                f"Model name cannot be empty. Please enter a valid name to deploy. ({exc.message})"
            ) from None
        if trimmed is not None and (trimmed == ".." or "/" in trimmed):
            raise InvalidArgument(
                f"invalid model name '{name}', model name must not contain path traversal characters ({exc.message})"
            ) from None
        raise


@dataclass(frozen=True)
class LoadRequest:
    """A checked repository load: the model, its config override as sent, its files as sent and normalised."""

    name: str
    config: str | dict[str, Any] | None
    files: dict[str, bytes]
    normalised: dict[PurePosixPath, bytes] | None


def parse_load_request(name: str, parameters: Mapping[str, object]) -> LoadRequest:
    """A load of the model `name` (already checked) with these parameters; InvalidArgument saying which is wrong."""
    config = parameters.get("config")
    if "config" in parameters and not isinstance(config, str | dict):
        raise InvalidArgument(f"failed to load '{name}': parameter 'config' must be a JSON string")
    try:
        files = sent_files(parameters)
        normalised = normalise_files(files) if files else None
    except InvalidArgument as exc:
        raise InvalidArgument(f"failed to load '{name}': {exc.message}") from None
    return LoadRequest(name, config, files, normalised)


async def load_model(
    server: InferenceServer, control: RepositoryControl | None, request: LoadRequest, caller: Principal
) -> None:
    """Load (or reload) the model: through the repository control when it takes the load, else in the engine."""
    check_repository_control(server.settings.model_control)
    if control is not None:
        override = config_override(request.name, request.config)
        if await control.load(request.name, config=override, files=request.normalised, caller=caller):
            return
    await server.load_model(request.name, config=request.config, files=request.files or None, caller=caller)


async def unload_model(
    server: InferenceServer, control: RepositoryControl | None, name: str, caller: Principal
) -> None:
    """Unload the model: through the repository control when it takes the unload, else in the engine."""
    check_repository_control(server.settings.model_control)
    if control is not None and await control.unload(name, caller=caller):
        return
    await server.unload_model(name, caller=caller)
