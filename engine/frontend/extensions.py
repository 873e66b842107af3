"""Triton's shared-memory, trace and logging extensions, answered the same way over HTTP and gRPC.

System shared memory is served (engine/shared_memory.py holds the regions); CUDA shared memory is not: its status is
truthfully empty and a registration is refused with a clear UNSUPPORTED error. Tracing is off and stays off: its
settings read back as such, and asking to turn it on is refused. Logging is live (engine/log_settings.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.errors import InvalidArgument, NotFound, Unsupported

if TYPE_CHECKING:
    from engine.server import InferenceServer

# ---- shared memory


def shared_memory_status(server: InferenceServer, kind: str, name: str | None) -> list[dict[str, Any]]:
    """The registered regions of `kind` ("system" or "cuda"), or the one named."""
    if kind == "system":
        return server.shared_memory.status(name)
    if name:
        raise NotFound(f"Unable to find cuda shared memory region: '{name}'")
    return []


def register_shared_memory(server: InferenceServer, kind: str, name: str, details: dict[str, Any]) -> None:
    """Register a system region (key, offset, byte_size); CUDA regions are refused, saying why."""
    if kind == "system":
        key, offset, byte_size = details.get("key"), details.get("offset", 0), details.get("byte_size")
        if not isinstance(key, str) or not _is_count(offset) or not _is_count(byte_size):
            raise InvalidArgument(
                f"registering system shared memory region '{name}' needs 'key' (a string), 'offset' and "
                "'byte_size' (non-negative integers)"
            )
        server.shared_memory.register(name, key, offset, byte_size)
        return
    why = "this server has no GPU" if server.manager.gpus == 0 else "this server does not support it yet"
    raise Unsupported(f"cannot register CUDA shared memory region '{name}': {why}; send the tensors in the request")


def unregister_shared_memory(server: InferenceServer, kind: str, name: str | None) -> None:
    """Unregistering what is not registered succeeds, as Triton does (there is nothing to release)."""
    if kind == "system":
        server.shared_memory.unregister(name)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# ---- trace


TRACE_DEFAULTS: dict[str, list[str]] = {
    "trace_level": ["OFF"],
    "trace_rate": ["1000"],
    "trace_count": ["-1"],
    "log_frequency": ["0"],
    "trace_file": [""],
    "trace_mode": ["triton"],
}


def trace_settings(model: str | None = None) -> dict[str, list[str]]:
    """The trace settings in force (global, or for `model`): tracing is off."""
    return {key: list(value) for key, value in TRACE_DEFAULTS.items()}


def update_trace_settings(changes: dict[str, Any], model: str | None = None) -> dict[str, list[str]]:
    """Accept settings that leave tracing off; refuse turning it on (this server does not trace requests)."""
    for key, value in changes.items():
        if key not in TRACE_DEFAULTS:
            raise InvalidArgument(f"unknown trace setting '{key}' (known: {', '.join(TRACE_DEFAULTS)})")
        if key == "trace_level":
            levels = value if isinstance(value, list) else [value]
            if any(str(level).upper() != "OFF" for level in levels if level is not None):
                raise Unsupported("request tracing is not supported by this server; trace_level can only be OFF")
    return trace_settings(model)
