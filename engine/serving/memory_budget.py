"""Many models under one memory budget: what each loaded version holds, on-demand loads, and eviction.

The server owns one `MemoryGovernor`. Every load of a version's instances goes through `MemoryGovernor.load`:
it reserves the version's expected footprint (its measured one, at least the size of its files per instance)
against the budget of each pool it uses (`host`, `gpu<N>`), evicting the least recently used on-demand versions
that are idle, not pinned and not needed by a loaded ensemble (waiting for busy ones to turn idle, up to the
cold-start timeout); when nothing could make room the load is refused with `MemoryBudgetExceeded`, which names the
budget and the biggest residents. A version's first load is measured (the process's RSS with its children's, a
GPU's used memory) alone, with no other first load or eviction meanwhile, so deltas do not mix; it is charged the
larger of that measure and its files' size, and the budget is checked again with it. Later loads (on demand) are
charged the same and run side by side.

Versions are parked, woken and marked busy by engine.serving.residency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import LoadError
from engine.settings import MemoryBudgetSettings

if TYPE_CHECKING:
    from engine.serving.residency import Residency

log = logging.getLogger("infera.engine")

HOST = "host"
# cold-start latency histogram bounds, in seconds (Prometheus `infera_model_cold_start_seconds`)
COLD_START_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MiB = 1 << 20


class MemoryBudgetExceeded(LoadError):
    """A version cannot fit: `needed` more bytes of `pool` than its `budget` leaves, nothing left to evict."""

    def __init__(
        self, model: str, version: int, pool: str, needed: int, budget: int, residents: list[tuple[str, int]]
    ) -> None:
        self.pool, self.needed, self.budget, self.residents = pool, needed, budget, residents
        biggest = ", ".join(f"{name} ({_mib(size)})" for name, size in residents[:3]) or "none"
        variable = "INFERA_MEMORY_BUDGET_MB" if pool == HOST else "INFERA_GPU_MEMORY_BUDGET"
        super().__init__(
            f"it needs about {_mib(needed)} of {pool} memory and the memory budget of {_mib(budget)} ({variable}) "
            f"has no room left that an eviction could free; the biggest residents: {biggest}",
            model=model,
            version=version,
        )


class Governed(Protocol):
    """What the governor reads of a loaded version (engine.serving.lifecycle.ServedVersion)."""

    name: str
    version: int
    path: Path
    residency: Residency

    def busy(self) -> bool: ...
    def instance_pools(self) -> list[str]: ...


@dataclass
class BudgetEvent:
    """One action of the governor's, for the audit of the engine's own actions: `load` or `evict`."""

    action: str
    model: str
    version: int
    footprint: dict[str, int]
    cold_start_seconds: float | None = None


class MemoryGovernor:
    """The one owner of the budget: residents, their charges, reservations, loads, evictions and their counts."""

    def __init__(
        self,
        budgets: dict[str, int] | None = None,
        *,
        cold_start_timeout: float = 60.0,
        sample: Callable[[Iterable[str]], dict[str, int]] | None = None,
    ) -> None:
        self.budgets = dict(budgets or {})  # pool -> bytes; a pool not named here is unbounded
        self.cold_start_timeout = cold_start_timeout
        self.sample = sample or sample_memory
        self.charged: dict[Governed, dict[str, int]] = {}  # resident or reserved versions and what they count
        self.needed_by_ensembles: Callable[[], set[str]] = set  # models the loaded ensembles call
        self.on_event: Callable[[BudgetEvent], None] | None = None
        self.loads = 0
        self.evictions = 0
        self.cold_start_buckets = [0] * len(COLD_START_BUCKETS)
        self.cold_start_count = 0
        self.cold_start_sum = 0.0
        self._admitting = asyncio.Lock()  # evictions and reservations, one load at a time
        self._measuring = asyncio.Lock()  # one load measured at a time: RSS deltas must not overlap
        self._idle = asyncio.Event()  # set when a version turns idle while a load waits for room
        self._room_wanted = 0

    @classmethod
    def from_settings(cls, settings: MemoryBudgetSettings, gpus: int) -> MemoryGovernor:
        budgets: dict[str, int] = {}
        if settings.host_bytes:
            budgets[HOST] = settings.host_bytes
        for gpu in range(gpus):
            if settings.gpu_bytes:
                budgets[f"gpu{gpu}"] = settings.gpu_bytes
            elif settings.gpu_fraction:
                budgets[f"gpu{gpu}"] = int(gpu_total_bytes(gpu) * settings.gpu_fraction)
        return cls(budgets, cold_start_timeout=settings.cold_start_timeout_seconds)

    def used(self, pool: str = HOST) -> int:
        return sum(charge.get(pool, 0) for charge in self.charged.values())

    async def load(self, served: Governed, open_: Callable[[], Awaitable[None]], *, cold: bool = False) -> None:
        """Open `served`'s instances with `open_` within the budget: room made first, the load measured, its charge
        checked again; MemoryBudgetExceeded (nothing opened) when it cannot fit."""
        started = time.perf_counter()
        residency = served.residency
        estimate = self.estimate(served)
        async with self._admitting:
            await self._make_room(served, estimate)
            self.charged[served] = estimate
        try:
            if set(estimate) <= set(residency.footprint):  # measured at its first load: loads run side by side
                await open_()
                charge = estimate
            else:
                charge = await self._measured(served, open_, estimate)
            if charge != estimate:  # it took more than reserved: room for the difference too
                async with self._admitting:
                    self.charged.pop(served, None)
                    try:
                        await self._make_room(served, charge)
                    finally:
                        self.charged[served] = charge
        except BaseException:
            self.charged.pop(served, None)
            raise
        residency.charged = charge
        residency.resident = True
        residency.loads += 1
        residency.touch()
        self.loads += 1
        self.idle()
        seconds = time.perf_counter() - started
        if cold:
            residency.cold_start_seconds = seconds
            self._observe_cold_start(seconds)
        self._emit(
            BudgetEvent("load", served.name, served.version, dict(residency.footprint), seconds if cold else None)
        )

    async def _measured(
        self, served: Governed, open_: Callable[[], Awaitable[None]], estimate: dict[str, int]
    ) -> dict[str, int]:
        """Run a first load alone and record what it took; returns its charge (never under its estimate)."""
        pools = list(estimate)
        async with self._measuring:
            before = await asyncio.to_thread(self.sample, pools)
            await open_()
            after = await asyncio.to_thread(self.sample, pools)
        served.residency.footprint = {pool: max(after.get(pool, 0) - before.get(pool, 0), 0) for pool in pools}
        return {pool: max(served.residency.footprint[pool], estimate[pool]) for pool in pools}

    def released(self, served: Governed) -> None:
        """`served` let its instances go (parked, unloaded, or its load failed): its charge ends."""
        self.charged.pop(served, None)
        served.residency.resident = False
        served.residency.charged = {}
        self.idle()

    def estimate(self, served: Governed) -> dict[str, int]:
        """What a load of `served` is expected to take in each pool: its measured footprint, at least its files'
        size for each instance there."""
        pools = served.instance_pools()
        footprint = served.residency.footprint
        size = files_size(served.path)
        return {pool: max(footprint.get(pool, 0), size * pools.count(pool)) for pool in dict.fromkeys(pools)}

    async def _make_room(self, served: Governed, need: dict[str, int]) -> None:
        """Evict least recently used idle on-demand versions until `need` fits in every bounded pool. When only
        busy ones could make room, wait for one to turn idle (up to the cold-start timeout); when nothing could,
        MemoryBudgetExceeded at once."""
        deadline = time.monotonic() + self.cold_start_timeout
        while True:
            victims, refusal = self._victims(served, need, idle_only=True)
            if refusal is None:
                break
            _, hopeless = self._victims(served, need, idle_only=False)
            remaining = deadline - time.monotonic()
            if hopeless is not None or remaining <= 0:
                raise refusal
            self._idle.clear()
            self._room_wanted += 1
            self._admitting.release()  # other loads may finish (and charge what they measured) meanwhile
            try:
                await asyncio.wait_for(self._idle.wait(), remaining)
            except TimeoutError:
                raise refusal from None
            finally:
                self._room_wanted -= 1
                await self._admitting.acquire()
        for victim in victims:
            await self.evict(victim)

    def idle(self) -> None:
        """A version's last request ended: a load waiting for room looks again."""
        if self._room_wanted:
            self._idle.set()

    def _victims(
        self, served: Governed, need: dict[str, int], *, idle_only: bool
    ) -> tuple[list[Governed], MemoryBudgetExceeded | None]:
        """The versions to evict so that `need` fits, least recently used first, or why it cannot fit."""
        victims: list[Governed] = []
        for pool, amount in need.items():
            budget = self.budgets.get(pool)
            if budget is None:
                continue
            short = self.used(pool) + amount - budget - sum(self.charged[v].get(pool, 0) for v in victims)
            for candidate in self._evictable(served, idle_only):
                if short <= 0:
                    break
                if candidate in victims or not self.charged[candidate].get(pool):
                    continue
                victims.append(candidate)
                short -= self.charged[candidate][pool]
            if short > 0:
                residents = sorted(
                    ((f"{s.name} v{s.version}", c.get(pool, 0)) for s, c in self.charged.items() if c.get(pool)),
                    key=lambda item: -item[1],
                )
                return [], MemoryBudgetExceeded(served.name, served.version, pool, amount, budget, residents)
        return victims, None

    def _evictable(self, served: Governed, idle_only: bool = True) -> list[Governed]:
        """Resident versions that may go, least recently used first: on demand, idle, not pinned, not needed by a
        loaded ensemble, and not `served` itself; without `idle_only`, also those busy or still loading (that may go
        once their requests end)."""
        needed = self.needed_by_ensembles()
        candidates = [
            s
            for s in self.charged
            if s is not served
            and (s.residency.resident or not idle_only)
            and s.residency.on_demand
            and not s.residency.pinned
            and s.name not in needed
            and not (idle_only and s.busy())
        ]
        return sorted(candidates, key=lambda s: s.residency.last_used)

    async def evict(self, served: Any) -> None:
        footprint = dict(served.residency.footprint)
        async with self._measuring:  # what it frees must not show in the delta of a load measured meanwhile
            await served.park()
        served.residency.evictions += 1
        self.evictions += 1
        log.info("model '%s' version %s evicted to make room in the memory budget", served.name, served.version)
        self._emit(BudgetEvent("evict", served.name, served.version, footprint))

    def _observe_cold_start(self, seconds: float) -> None:
        self.cold_start_count += 1
        self.cold_start_sum += seconds
        for i, bound in enumerate(COLD_START_BUCKETS):
            if seconds <= bound:
                self.cold_start_buckets[i] += 1

    def _emit(self, event: BudgetEvent) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # a listener's failure never fails a load
                log.exception("memory budget listener failed")


def files_size(path: Path) -> int:
    """The bytes of every file under a version folder (a floor for what loading it takes)."""
    try:
        return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
    except OSError:
        return 0


def sample_memory(pools: Iterable[str]) -> dict[str, int]:
    """Bytes in use now per pool: `host` the process's RSS with its children's (python stubs), `gpu<N>` NVML's
    used memory of that GPU."""
    readings: dict[str, int] = {}
    for pool in pools:
        if pool == HOST:
            readings[pool] = process_rss()
        elif pool.startswith("gpu"):
            readings[pool] = gpu_used_bytes(int(pool[3:]))
    return readings


def process_rss() -> int:
    import psutil

    process = psutil.Process()
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:  # it ended meanwhile
            pass
    return total


def gpu_used_bytes(gpu: int) -> int:
    return _gpu_memory(gpu, "used")


def gpu_total_bytes(gpu: int) -> int:
    return _gpu_memory(gpu, "total")


def _gpu_memory(gpu: int, which: str) -> int:
    from engine.serving.devices import nvml

    library, _ = nvml()
    if library is None:
        return 0
    try:
        return int(getattr(library.nvmlDeviceGetMemoryInfo(library.nvmlDeviceGetHandleByIndex(gpu)), which))
    except Exception:  # noqa: BLE001 - a device that does not answer: nothing measured
        return 0


def _mib(size: int) -> str:
    """A size as people read it: 1000 bytes, 2 KiB, 40 MiB, 1.5 GiB."""
    if size >= 1 << 30:
        return f"{size / (1 << 30):.1f} GiB"
    if size >= MiB:
        return f"{size / MiB:.0f} MiB"
    return f"{size / 1024:.0f} KiB" if size >= 1024 else f"{size} bytes"
