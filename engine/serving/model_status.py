"""What a model's versions are doing (loading, ready, unavailable, unloading) and the arrays a warm-up sends."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from engine.config.datatypes import config_to_wire, numpy_dtype
from engine.config.model_config import ModelConfig


class ModelState(StrEnum):
    """Triton's model version states."""

    LOADING = "LOADING"
    READY = "READY"
    UNLOADING = "UNLOADING"
    UNAVAILABLE = "UNAVAILABLE"


@dataclass(frozen=True)
class VersionMemory:
    """A loaded version's place in the memory budget (engine.serving.memory_budget)."""

    resident: bool  # its instances are loaded (an on-demand version is READY without them until a request)
    on_demand: bool
    pinned: bool
    footprint: dict[str, int]  # bytes its last load took per pool ("host", "gpu0", ...)
    loads: int
    last_used: float | None  # epoch seconds of its last request
    cold_start_seconds: float | None  # its last load on demand, from the request that started it

    def to_dict(self) -> dict:
        return {
            "resident": self.resident,
            "on_demand": self.on_demand,
            "pinned": self.pinned,
            "footprint_bytes": dict(self.footprint),
            "loads": self.loads,
            "last_used": self.last_used,
            "cold_start_seconds": self.cold_start_seconds,
        }


@dataclass(frozen=True)
class VersionStatus:
    """Where one version stands in this engine, and why when it is not READY."""

    version: int
    state: ModelState
    reason: str = ""
    memory: VersionMemory | None = field(
        default=None, compare=False
    )  # for a loaded version: resident or not, its footprint, its use


@dataclass(frozen=True)
class ModelStatus:
    """What this engine holds of one model: each known version's state, the active version, a model-wide error."""

    name: str
    versions: dict[int, VersionStatus] = field(default_factory=dict)
    active: int | None = None
    error: str = ""  # why the model as a whole could not load (its config, its folder)

    @property
    def ready(self) -> frozenset[int]:
        return frozenset(v for v, status in self.versions.items() if status.state is ModelState.READY)

    @property
    def serving(self) -> int | None:
        """The version unversioned requests reach, when it is READY."""
        return self.active if self.active in self.ready else None

    def failure(self, version: int) -> str | None:
        status = self.versions.get(version)
        return status.reason if status is not None and status.state is ModelState.UNAVAILABLE else None


def warmup_inputs(config: ModelConfig, sample) -> dict[str, np.ndarray]:
    """Arrays for one `model_warmup` sample (zero or random data)."""
    rng = np.random.default_rng(0)
    arrays: dict[str, np.ndarray] = {}
    for name, spec in sample.inputs.items():
        shape = ([sample.batch_size] if config.max_batch_size > 0 else []) + [max(d, 1) for d in spec.dims]
        wire = config_to_wire(spec.data_type)
        if wire == "BYTES":
            arrays[name] = np.full(shape, b"0", dtype=object)
        elif spec.random_data:
            arrays[name] = rng.random(shape).astype(numpy_dtype(wire))
        else:
            arrays[name] = np.zeros(shape, dtype=numpy_dtype(wire))
    return arrays
