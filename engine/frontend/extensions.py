"""Triton's shared-memory, trace and logging extensions, answered the same way over HTTP and gRPC.

Shared memory is not served yet: the status of regions is truthfully empty and a registration is refused with a
clear UNSUPPORTED error, so clients fall back to sending tensors in the request. Tracing is off and stays off: its
settings read back as such, and asking to turn it on is refused. Logging is live (engine/log_settings.py).
"""

from __future__ import annotations

from typing import Any

from engine.errors import InvalidArgument, NotFound, Unsupported

# ---- shared memory


def shared_memory_status(kind: str, name: str | None) -> list[dict[str, Any]]:
    """The registered regions of `kind` ("system" or "cuda"): none, since this server registers none."""
    if name:
        raise NotFound(f"Unable to find {kind} shared memory region: '{name}'")
    return []


def register_shared_memory(kind: str, name: str, gpus: int = 0) -> None:
    """Refuse a registration, saying why and what to do instead."""
    if kind == "cuda" and gpus == 0:
        raise Unsupported(
            f"cannot register CUDA shared memory region '{name}': this server has no GPU; send the tensors in the "
            "request"
        )
    raise Unsupported(
        f"cannot register {kind} shared memory region '{name}': this server does not support {kind} shared memory; "
        "send the tensors in the request"
    )


def unregister_shared_memory(kind: str, name: str | None) -> None:
    """Unregistering what is not registered succeeds, as Triton does (there is nothing to release)."""


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
