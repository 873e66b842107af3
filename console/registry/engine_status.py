"""What this process's engine holds of a model, for the API and pages (empty when no engine runs here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from console import engine_link
from console.registry.reconciler import engine_view


@dataclass(frozen=True)
class EngineStatus:
    """READY versions and the version answering unversioned requests, in this process's engine."""

    ready: frozenset[int] = field(default_factory=frozenset)
    serving: int | None = None

    @classmethod
    def of(cls, name: str, context: dict[str, Any]) -> EngineStatus:
        """The status of `name`; the engine's index is read once per serializer context (a list asks per model)."""
        server = engine_link.server_or_none()
        if server is None:
            return cls()
        if "engine_index" not in context:
            context["engine_index"] = server.repository_index()
        ready, serving = engine_view(server, name, context["engine_index"])
        return cls(frozenset(ready), serving)
