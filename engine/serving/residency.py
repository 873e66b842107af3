"""Whether a served version's instances are in memory: load on demand, park, and what keeps a version busy.

A version of an `on_demand` model (config parameter `on_demand: "true"`) is loaded once when it is admitted (its
footprint measured), then parked: READY, without instances. Its first request starts the load and waits for it;
requests arriving meanwhile wait on that same load, never a second one, bounded by the cold-start timeout (then
503 with Retry-After). The memory governor (engine.serving.memory_budget) parks the least recently used idle ones
to make room; `pinned: "true"` keeps a version resident once loaded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.config.model_config import ModelConfig
from engine.ensembles.plan import step_models
from engine.errors import LoadError, Unavailable
from engine.serving.memory_budget import HOST, MemoryGovernor
from engine.serving.model_status import ModelState, VersionMemory
from engine.serving.placement import instance_slots

if TYPE_CHECKING:
    from engine.schedulers.dispatcher import Dispatcher


@dataclass
class Residency:
    """One version's side of the budget: resident or parked, its footprint, its use, and its on-demand load."""

    on_demand: bool = False
    pinned: bool = False
    resident: bool = False
    footprint: dict[str, int] = field(default_factory=dict)  # pool -> bytes measured at its last load
    charged: dict[str, int] = field(default_factory=dict)  # pool -> bytes counted against the budget now
    last_used: float = 0.0  # time.monotonic() of its last request
    loads: int = 0
    evictions: int = 0
    cold_start_seconds: float | None = None  # how long its last load on demand took, request to resident
    waiting: int = 0  # requests waiting for its load on demand
    waking: asyncio.Future | None = None  # the one load on demand under way
    parked: asyncio.Event = field(default_factory=asyncio.Event)  # set when no park is under way

    def __post_init__(self) -> None:
        self.parked.set()

    @classmethod
    def of(cls, config: ModelConfig, governed: bool) -> Residency:
        """From the config's parameters; on demand only under a manager's governor."""
        flags = config.parameters
        on_demand = governed and flags.get("on_demand", "").lower() == "true"
        return cls(on_demand=on_demand, pinned=flags.get("pinned", "").lower() == "true")

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def status(self) -> VersionMemory:
        last = time.time() - (time.monotonic() - self.last_used) if self.last_used else None
        return VersionMemory(
            self.resident,
            self.on_demand,
            self.pinned,
            dict(self.footprint),
            self.loads,
            last,
            self.cold_start_seconds,
        )

    def _woken(self, task: asyncio.Future) -> None:
        self.waking = None
        if not task.cancelled():
            task.exception()  # read here too: every waiter may have timed out


class ResidentInstances:
    """What engine.serving.lifecycle.ServedVersion does for the memory budget: bring its instances in (measured
    and charged), park them, load them again on demand, and say whether anything still needs them."""

    name: str
    version: int
    config: ModelConfig
    state: ModelState
    budget: MemoryGovernor | None
    residency: Residency
    dispatcher: Dispatcher | None
    inflight: int
    open_streams: int
    _opening: tuple[int, Any, Any]
    _open: Callable[..., Awaitable[None]]
    _release: Callable[[], Awaitable[None]]
    _check_cancelled: Callable[[], None]
    live_sequences: Callable[[], int]

    async def _bring_in(self, *, cold: bool = False) -> None:
        """Open the instances within the memory budget (measured and charged there)."""
        if self.budget is None:
            await self._open(*self._opening)
            self.residency.resident = True
            return
        try:
            await self.budget.load(self, lambda: self._open(*self._opening), cold=cold)
        except BaseException:
            await self._release()
            raise

    def instance_pools(self) -> list[str]:
        """The memory pools of its instances, one entry per instance in each (`host`, and `gpu<N>` on a GPU)."""
        pools = []
        for device, _ in instance_slots(self.config, self._opening[0]):
            pools += [HOST, f"gpu{device.id}"] if device.is_gpu else [HOST]
        return pools

    def busy(self) -> bool:
        """Whether anything still needs its instances: requests in flight or waiting, streams, live sequences."""
        return bool(self.inflight or self.open_streams or self.residency.waiting or self.live_sequences())

    async def park(self) -> None:
        """Let the instances go but stay READY: the next request loads them again (on-demand versions)."""
        residency = self.residency
        residency.resident = False
        residency.parked.clear()
        try:
            dispatcher, self.dispatcher = self.dispatcher, None
            if dispatcher is not None:
                await dispatcher.stop()
            await self._release()
        finally:
            residency.parked.set()

    async def wait_resident(self) -> None:
        """Wait until the version is resident again, starting its load unless one is under way (one load for every
        waiting request); past the cold-start timeout Unavailable (503, Retry-After), the load going on."""
        residency = self.residency
        timeout = self.budget.cold_start_timeout if self.budget is not None else 60.0
        residency.waiting += 1
        try:
            while not residency.resident and self.state is ModelState.READY:
                if residency.waking is None:
                    residency.waking = asyncio.ensure_future(self._wake())
                    residency.waking.add_done_callback(residency._woken)
                try:
                    await asyncio.wait_for(asyncio.shield(residency.waking), timeout)
                except TimeoutError:
                    raise Unavailable(
                        f"model '{self.name}' version {self.version} is loading on demand and was not ready within "
                        f"{timeout:g} s"
                    ) from None
                except Exception as exc:  # noqa: BLE001 - any failure of the load: this request cannot run now
                    reason = exc.reason if isinstance(exc, LoadError) else str(exc) or type(exc).__name__
                    raise Unavailable(
                        f"model '{self.name}' version {self.version} could not load on demand: {reason}"
                    ) from None
        finally:
            residency.waiting -= 1
            if self.budget is not None and not residency.waiting:
                self.budget.idle()

    async def _wake(self) -> None:
        await self.residency.parked.wait()
        self._check_cancelled()
        await self._bring_in(cold=True)


def ensemble_steps(models: dict[str, Any]) -> set[str]:
    """The models that loaded ensembles call (none of them may be evicted from the memory budget)."""
    return {
        model
        for entry in models.values()
        for served in entry.versions.values()
        if served.config.backend_name == "ensemble" and served.state is not ModelState.UNAVAILABLE
        for model in step_models(served.config)
    }
