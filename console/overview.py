"""What the home page shows: the whole server at a glance, built once per request by `build_overview`.

Models come from the registry (which versions should serve, each one's state and failure reason) and from this
process's engine (`InferenceServer.status`: what is READY, which version answers, why a version is unavailable);
the figures from the sampler's newest snapshot and its hour of minutes; the last audit events from the database.
Failed and degraded models come first. No text shown here carries a server path (console/server_paths.py).
static/console/overview.js keeps the page live from /ws/metrics/.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.server_paths import shown

# a model's health, worst first: the order of the cards and of the counts
HEALTH_ORDER = ("failed", "degraded", "loading", "ready", "idle")
RECENT_AUDIT_EVENTS = 8
# the server's figures, now and over the hour: (snapshot key, label, kind); static/console/overview.js formats alike
FIGURES = (
    ("requests_per_s", "Requests", "rate"),
    ("p99_ms", "p99 latency (slowest model)", "ms"),
    ("error_rate", "Error rate", "percent"),
)
_WAITING = (VersionState.PENDING, VersionState.LOADING)


@dataclass(frozen=True)
class ModelCard:
    """One model on the overview: its health in a word, what serves, and why it is failed or degraded."""

    name: str
    health: str  # one of HEALTH_ORDER
    summary: str  # "version 2 serves", "no version serves"
    reason: str = ""  # why it is failed or degraded, without server paths
    description: str = ""
    platform: str = ""
    serving: int | None = None
    registered: bool = True

    @property
    def needs_attention(self) -> bool:
        return self.health in ("failed", "degraded")


@dataclass(frozen=True)
class DeviceGauge:
    """One device's load now: a GPU (NVML) or, on a machine without one, the CPU and the host's memory."""

    key: str  # "gpu:0", "cpu": how the page's script finds it in a snapshot
    label: str
    utilization: float | None  # 0.0 - 1.0
    memory_used_bytes: int | None
    memory_total_bytes: int | None

    @property
    def memory_fraction(self) -> float | None:
        if not self.memory_total_bytes or self.memory_used_bytes is None:
            return None
        return self.memory_used_bytes / self.memory_total_bytes


@dataclass(frozen=True)
class FigureRow:
    """One of the server's figures, now and over the last hour, as the page shows them."""

    key: str
    label: str
    kind: str
    now: str
    hour: str


def formatted(value: float | None, kind: str) -> str:
    """A figure as the page shows it: "12.5/s", "3.10 ms", "0.4%", "–" for none."""
    if value is None:
        return "–"
    if kind == "rate":
        return f"{value:.1f}/s" if value < 10 else f"{math.floor(value + 0.5)}/s"  # half up, as JavaScript rounds
    if kind == "ms":
        return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"
    return f"{value * 100:.1f}%"


@dataclass(frozen=True)
class Overview:
    """Everything the home page shows."""

    engine_state: str  # starting, ready, failed, absent (console/hosting/runtime.py)
    engine_failure: str | None
    cards: list[ModelCard]
    now: dict[str, Any] | None  # the newest snapshot's `server` figures (engine/monitoring/sampler.py)
    hour: dict[str, Any] | None  # the sampler's hour of minutes in one set of figures
    devices: list[DeviceGauge]
    audit: list[AuditEvent]
    sampling: bool
    memory: list[dict[str, Any]] = field(default_factory=list)  # the memory budget's bars, one a pool

    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        counts = {health: 0 for health in HEALTH_ORDER}
        for card in self.cards:
            counts[card.health] += 1
        object.__setattr__(self, "counts", counts)

    @property
    def attention(self) -> list[ModelCard]:
        """The failed and degraded models, with their reasons."""
        return [card for card in self.cards if card.needs_attention]

    @property
    def figures(self) -> list[FigureRow]:
        now, hour = self.now or {}, self.hour or {}
        return [
            FigureRow(key, label, kind, formatted(now.get(key), kind), formatted(hour.get(key), kind))
            for key, label, kind in FIGURES
        ]

    @property
    def signature(self) -> str:
        """Changes whenever a card would look different, live numbers aside (the page swaps its cards then)."""
        text = "\n".join(
            f"{c.name}\t{c.health}\t{c.summary}\t{c.reason}\t{c.description}\t{c.platform}" for c in self.cards
        )
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

    @property
    def device_keys(self) -> str:
        """Which devices the page shows ("cpu", "gpu:0 gpu:1"): the page swaps its device panel when they change."""
        return " ".join(device.key for device in self.devices)

    @property
    def gpus(self) -> bool:
        return any(device.key.startswith("gpu:") for device in self.devices)


def build_overview(runtime: Any) -> Overview:
    """The overview of this process: `runtime` is the hosting Runtime, or None when no engine runs here."""
    server = runtime.server if runtime is not None else None
    sampler = runtime.sampler if runtime is not None else None
    latest = sampler.latest if sampler is not None else None
    return Overview(
        engine_state=runtime.state if runtime is not None else "absent",
        engine_failure=shown(runtime.startup_failure) if runtime is not None and runtime.startup_failure else None,
        cards=model_cards(RegisteredModel.objects.prefetch_related("versions"), server),
        now=latest.get("server") if latest is not None else None,
        hour=sampler.history.summary() if latest is not None else None,
        devices=device_gauges(latest["devices"]) if latest is not None else [],
        audit=list(AuditEvent.objects.all()[:RECENT_AUDIT_EVENTS]),
        sampling=latest is not None,
        memory=memory_bars(server.memory_use()) if server is not None else [],
    )


def memory_bars(use: dict[str, Any]) -> list[dict[str, Any]]:
    """One bar a memory pool (host, gpu<N>): what loaded versions are charged, against its budget when set."""
    return [
        {"pool": pool, **figures, "fraction": figures["used"] / figures["budget"] if figures["budget"] else None}
        for pool, figures in use["pools"].items()
    ]


def model_cards(models: Iterable[RegisteredModel], server: Any) -> list[ModelCard]:
    """A card per registered model, and per model the engine holds that the registry does not; worst first."""
    cards = [registered_card(model, server.status(model.name) if server is not None else None) for model in models]
    if server is not None:
        known = {card.name for card in cards}
        cards += engine_only_cards(row for row in server.repository_index() if row["name"] not in known)
    return sorted(cards, key=lambda card: (HEALTH_ORDER.index(card.health), card.name))


def registered_card(model: RegisteredModel, status: Any) -> ModelCard:
    """The health of a registered model from its versions' desired and recorded states and, when an engine runs
    here, what the engine holds of it (`status`: engine.serving.model_status.ModelStatus)."""
    wanted = [version for version in model.versions.all() if version.should_load]
    failures = [f"version {v.number}: {reason}" for v in wanted if (reason := _failure(v, status))]
    if status is not None and status.error:
        failures.insert(0, status.error)
    serving = _serving(model, status)
    waiting = [v.number for v in wanted if v.state in _WAITING and not _failure(v, status)]
    if serving is not None:
        health = "degraded" if failures else "ready"
        summary = f"version {serving} serves" + (f"; version {_numbers(waiting)} loading" if waiting else "")
    elif failures:
        health, summary = "failed", "no version serves"
    elif wanted:
        health, summary = "loading", f"version {_numbers([v.number for v in wanted])} loading"
    else:
        health, summary = "idle", "no version is set to serve" if model.versions.all() else "no version uploaded"
    return ModelCard(
        name=model.name,
        health=health,
        summary=summary,
        reason=shown("; ".join(failures)),
        description=shown(model.description),
        platform=model.platform or model.backend,
        serving=serving,
    )


def _failure(version: ModelVersion, status: Any) -> str:
    """Why a version that should serve does not: the registry's reason, or the engine's."""
    if version.state == VersionState.FAILED:
        return version.error or "failed to load"
    return (status.failure(version.number) or "") if status is not None else ""


def _serving(model: RegisteredModel, status: Any) -> int | None:
    if status is not None:
        return status.serving
    active = next((v for v in model.versions.all() if v.pk == model.active_version_id), None)
    return active.number if active is not None and active.state == VersionState.READY else None


def _numbers(numbers: list[int]) -> str:
    return ", ".join(str(number) for number in sorted(numbers))


def engine_only_cards(rows: Iterable[dict[str, Any]]) -> list[ModelCard]:
    """Cards for models the engine's repository holds but the registry does not (Triton's repository index)."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(row["name"], []).append(row)
    cards = []
    for name, versions in by_name.items():
        ready = sorted(int(row["version"]) for row in versions if row.get("state") == "READY")
        reasons = [row["reason"] for row in versions if row.get("state") == "UNAVAILABLE" and row.get("reason")]
        if ready:
            health, summary = ("degraded" if reasons else "ready"), f"version {_numbers(ready)} ready"
        elif reasons:
            health, summary = "failed", "no version serves"
        elif any(row.get("state") == "LOADING" for row in versions):
            health, summary = "loading", "loading"
        else:
            health, summary = "idle", "not loaded"
        summary += " (in the model store, not registered)"
        cards.append(ModelCard(name, health, summary, shown("; ".join(reasons)), registered=False))
    return cards


def device_gauges(devices: dict[str, Any]) -> list[DeviceGauge]:
    """Each GPU of a snapshot's `devices`, or the CPU and host memory when it has none."""
    gpus = devices.get("gpus") or []
    if gpus:
        return [
            DeviceGauge(
                key=f"gpu:{gpu['index']}",
                label=f"GPU {gpu['index']}" + (f" · {gpu['name']}" if gpu.get("name") else ""),
                utilization=gpu.get("utilization"),
                memory_used_bytes=gpu.get("memory_used_bytes"),
                memory_total_bytes=gpu.get("memory_total_bytes"),
            )
            for gpu in gpus
        ]
    cpu = devices["cpu"]
    return [DeviceGauge("cpu", "CPU (no GPU)", cpu["utilization"], cpu["memory_used_bytes"], cpu["memory_total_bytes"])]
