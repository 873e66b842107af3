"""What this process's engine holds of a model, for the API and pages (empty when no engine runs here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console.runtime_of import runtime_of


@dataclass(frozen=True)
class EngineStatus:
    """READY versions and the version answering unversioned requests, in this process's engine."""

    ready: frozenset[int] = field(default_factory=frozenset)
    serving: int | None = None
    # each loaded version's place in the memory budget (VersionMemory.to_dict: resident, footprint, last use...)
    memory: dict[int, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, context: dict[str, Any]) -> EngineStatus:
        """The status of `name` in the engine of the request the serializer context carries."""
        runtime = runtime_of(context.get("request"))
        if runtime is None:
            return cls()
        status = runtime.server.status(name)
        memory = {n: v.memory.to_dict() for n, v in status.versions.items() if v.memory is not None}
        return cls(status.ready, status.serving, memory)


def memory_budget(context: dict[str, Any]) -> dict[str, Any] | None:
    """This process's memory budget and its use per pool (InferenceServer.memory_use); None without an engine."""
    runtime = runtime_of(context.get("request"))
    return runtime.server.memory_use() if runtime is not None else None


def engine_traffic(name: str, context: dict[str, Any]) -> dict[str, Any] | None:
    """The traffic policy in force for `name` in this process's engine, with its shadow comparison and its last
    automatic rollback (InferenceServer.traffic_status); None when no engine runs here."""
    runtime = runtime_of(context.get("request"))
    return runtime.server.traffic_status(name) if runtime is not None else None
