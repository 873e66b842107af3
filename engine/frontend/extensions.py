"""Triton's shared-memory, trace and logging extensions, answered the same way over HTTP and gRPC.

System shared memory is served (engine/protocol/shared_memory.py holds the regions, each the registering caller's
own) once allowed: as in Triton since `--allow-client-shm`, clients may not register or unregister regions unless
the server was started with it (`serve --allow-client-shm=true`, INFERA_ALLOW_CLIENT_SHM=true); status answers
either way. CUDA shared memory is not served: its status is truthfully empty and a registration is refused with a
clear UNSUPPORTED error. Tracing records timestamps
(engine/monitoring/tracing.py). Logging is live (engine/monitoring/log_settings.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import InvalidArgument, NotFound, Unsupported

if TYPE_CHECKING:
    from engine.serving.admission import Principal
    from engine.serving.server import InferenceServer

# Triton's refusal word for word (server's common.h), then how this server is started with it
CLIENT_SHM_DISABLED = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable. "
    "(manage.py serve --allow-client-shm=true, or INFERA_ALLOW_CLIENT_SHM=true)"
)

# ---- shared memory


def shared_memory_status(
    server: InferenceServer, kind: str, name: str | None, caller: Principal
) -> list[dict[str, Any]]:
    """The caller's registered regions of `kind` ("system" or "cuda"), or the one named."""
    if kind == "system":
        return server.shared_memory.status(name, caller=caller)
    if name:
        raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
    return []


def register_shared_memory(
    server: InferenceServer, kind: str, name: str, details: dict[str, Any], caller: Principal
) -> None:
    """Register a system region (key, offset, byte_size) as the caller's; CUDA regions are refused, saying why."""
    _check_allowed(server)
    if kind == "system":
        key, offset, byte_size = details.get("key"), details.get("offset", 0), details.get("byte_size")
        if not isinstance(key, str) or not _is_count(offset) or not _is_count(byte_size):
            raise InvalidArgument(
                f"registering system shared memory region '{name}' needs 'key' (a string), 'offset' and "
                "'byte_size' (non-negative integers)"
            )
        server.shared_memory.register(name, key, offset, byte_size, caller=caller)
        return
    why = "this server has no GPU" if server.manager.gpus == 0 else "this server does not support it yet"
    raise Unsupported(f"cannot register CUDA shared memory region '{name}': {why}; send the tensors in the request")


def unregister_shared_memory(server: InferenceServer, kind: str, name: str | None, caller: Principal) -> None:
    """Unregister one of the caller's regions (no name: all of the caller's). Unregistering what is not registered
    succeeds, as Triton does (there is nothing to release)."""
    _check_allowed(server)
    if kind == "system":
        server.shared_memory.unregister(name, caller=caller)


def _check_allowed(server: InferenceServer) -> None:
    """Registering and unregistering need client shared memory allowed (Triton: UNSUPPORTED, HTTP 501)."""
    if not server.shared_memory.limits.allowed:
        raise Unsupported(CLIENT_SHM_DISABLED)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---- trace (engine/monitoring/tracing.py holds the settings and writes the files)


def trace_settings(server: InferenceServer, model: str | None = None) -> dict[str, Any]:
    """The trace settings in force, global or for `model`."""
    _check_trace_model(server, model)
    return server.tracer.settings(model)


def update_trace_settings(server: InferenceServer, changes: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    """Change trace settings (a model's own, or the global ones); the settings now in force."""
    _check_trace_model(server, model)
    return server.tracer.update(changes, model)


def _check_trace_model(server: InferenceServer, model: str | None) -> None:
    """A model's trace settings exist only for a model that is ready, as Triton's (INVALID_ARG, its words)."""
    if model and not server.model_ready(model):
        raise InvalidArgument(f"Request for unknown model : {model}")
