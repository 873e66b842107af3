"""The backend registry: name -> Backend class, built-ins loaded lazily, plugins from entry points."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from engine.backends.base import Backend, Device
from engine.errors import LoadError

__all__ = ["Backend", "Device", "get_backend", "register_backend", "available_backends"]

ENTRY_POINT_GROUP = "infera.backends"

# built-ins are imported only when a model needs them, so torch loads only for torch models
_BUILTIN_MODULES = {
    "onnxruntime": "engine.backends.onnxruntime",
    "pytorch": "engine.backends.pytorch",
    "python": "engine.backends.python",
    "ensemble": "engine.backends.ensemble",
    "llm": "engine.backends.llm",
    "encoder": "engine.backends.encoder",
    "lora": "engine.backends.lora",
}
_registry: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available under its `name`."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no backend name")
    _registry[cls.name] = cls
    return cls


def get_backend(name: str) -> type[Backend]:
    """The backend class registered under `name`, importing a built-in or an entry point on first use."""
    if name in _registry:
        return _registry[name]
    if name in _BUILTIN_MODULES:
        try:
            importlib.import_module(_BUILTIN_MODULES[name])
        except ImportError as exc:  # a runtime missing from this install is a load failure, not a crash
            raise LoadError(f"backend '{name}' is not available: {exc}") from exc
    else:
        for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
            register_backend(ep.load())
    if name not in _registry:
        known = ", ".join(available_backends()) or "none"
        raise LoadError(f"unknown backend '{name}' (available: {known})")
    return _registry[name]


def available_backends() -> list[str]:
    """Every backend name that can be asked for."""
    names = set(_registry) | set(_BUILTIN_MODULES)
    names |= {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)
