"""The `ensemble` platform in the backend registry: no runtime of its own (engine.ensembles.dispatcher runs it)."""

from __future__ import annotations

from typing import Any

from engine.backends import register_backend
from engine.backends.base import Backend
from engine.ensembles.plan import EnsemblePlan
from engine.errors import BackendError, InferaError, LoadError


@register_backend
class EnsembleBackend(Backend):
    """Nothing to load and nothing to execute: an ensemble's version folder holds no model file."""

    name = "ensemble"

    def load(self) -> None:
        """Check the steps on their own; the composing models are checked when the ensemble serves."""
        try:
            EnsemblePlan(self.config)
        except InferaError as exc:
            raise LoadError(exc.message) from None

    def execute(self, batch: Any) -> Any:
        raise BackendError(f"ensemble '{self.config.name}' runs its steps on their models, not on an instance")
