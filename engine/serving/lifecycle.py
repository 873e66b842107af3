"""Model versions and their states: load, warm up, switch traffic, drain and unload without downtime."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.backends.base import InstanceContext, InstanceFailure
from engine.config.model_config import ModelConfig
from engine.config.names import without_folders
from engine.ensembles.dispatcher import EnsembleDispatcher
from engine.ensembles.plan import EnsemblePlan
from engine.errors import LoadError, ModelNotFound, Unavailable
from engine.schedulers.dispatcher import Dispatcher, DynamicDispatcher
from engine.schedulers.sequence_dispatcher import SequenceDispatcher
from engine.serving.instances import ModelInstance
from engine.serving.memory_budget import MemoryGovernor
from engine.serving.memory_return import release_memory
from engine.serving.model_status import ModelState, ModelStatus, VersionStatus, warmup_inputs
from engine.serving.placement import instance_slots, open_backend
from engine.serving.residency import Residency, ResidentInstances, ensemble_steps
from engine.serving.stats import ModelStats
from engine.serving.streams import StreamStats
from engine.settings import SequenceLimits
from engine.types import InferenceRequest, InferenceResponse, current_caller

log = logging.getLogger("infera.engine")

# how long a retired version of a sequence model keeps serving its live sequences before it unloads anyway
SEQUENCE_DRAIN_SECONDS = 60.0


class ServedVersion(ResidentInstances):
    """One loaded model version: its instances, its dispatcher, its stats and its in-flight count."""

    def __init__(self, config: ModelConfig, version: int, path: Path, budget: MemoryGovernor | None = None) -> None:
        self.config = config
        self.name = config.name
        self.version = version
        self.path = Path(path)
        self.state = ModelState.LOADING
        self.reason = ""
        self.failure: InstanceFailure | None = None  # an instance that failed for good: UNAVAILABLE until reloaded
        self.stats = ModelStats(self.name, version)
        if config.decoupled:
            self.stats.streams = StreamStats()
        self.instances: list[ModelInstance] = []
        self.dispatcher: Dispatcher | None = None
        self.inflight = 0
        self.open_streams = 0  # a decoupled model's requests past execute whose final response has not come
        self._streams_closed = asyncio.Event()
        self._streams_closed.set()
        self.cancelled = False
        self._drained = asyncio.Event()
        self._drained.set()
        self._stop_draining = asyncio.Event()  # the server stops: live sequences are not waited for
        self.budget = budget  # None: loaded outside the manager (an analysis), neither charged nor on demand
        self.residency = Residency.of(config, governed=budget is not None)
        self._opening: tuple[int, Any, SequenceLimits | None] = (0, None, None)

    def cancel(self) -> None:
        """Stop a load in progress at its next step (the model is being unloaded); its load() raises LoadError."""
        self.cancelled = True

    def _check_cancelled(self) -> None:
        if self.cancelled:
            raise LoadError("the model was unloaded while this version was loading")

    async def load(self, gpus: int, services: Any = None, sequence_limits: SequenceLimits | None = None) -> None:
        """Create and load every instance, warm up, then start taking requests; cleans up on failure.

        `services` (engine.serving.model_services.ModelServices) is what model code of this version may call on.
        """
        if self.config.backend_name == "ensemble":
            self._load_ensemble(services)
            return
        self._opening = (gpus, services, sequence_limits)
        await self._bring_in()
        self.state = ModelState.READY
        if self.residency.on_demand:  # measured, now parked until its first request
            await self.park()

    async def _open(self, gpus: int, services: Any, sequence_limits: SequenceLimits | None) -> None:
        loop = asyncio.get_running_loop()

        def failed(failure: InstanceFailure) -> None:  # an instance's own thread: the state changes on the loop
            loop.call_soon_threadsafe(self.instance_failed, failure)

        try:
            for i, (device, instance_name) in enumerate(instance_slots(self.config, gpus)):
                self._check_cancelled()
                context = InstanceContext(instance_name, services, failed)
                backend = await asyncio.to_thread(open_backend, self.config, self.path, device, context)
                instance = ModelInstance(f"{self.name}-{self.version}-{i}", backend)
                instance.start()
                self.instances.append(instance)
            await self._warm_up()
            if self.failure is not None:
                raise LoadError(self.reason)
        except BaseException:
            await self._release()
            raise
        if self.config.sequence_batching is not None:
            self.dispatcher = SequenceDispatcher(
                self.name, self.version, self.config, self.instances, self.stats, self.path, sequence_limits
            )
        else:
            self.dispatcher = DynamicDispatcher(self.name, self.version, self.config, self.instances, self.stats)
        self.dispatcher.start()

    def _load_ensemble(self, services: Any) -> None:
        """An ensemble has no instances: its dispatcher sends each step to its model through the server."""
        plan = EnsemblePlan(self.config)
        if services is None:
            raise LoadError("an ensemble needs a server to run its steps on")
        dispatcher = EnsembleDispatcher(plan, self.version, services.infer, self.stats, services.infer_stream)
        problem = dispatcher.recheck(services.config_of)
        if problem is not None:
            raise LoadError(problem)
        self.dispatcher = dispatcher
        self.residency.resident = True  # it holds nothing: never loaded on demand, never charged
        self.state = ModelState.READY

    def recheck_ensemble(self, services: Any) -> None:
        """An ensemble whose composing models changed: UNAVAILABLE with the reason, or READY again."""
        dispatcher = self.dispatcher
        if (
            dispatcher is None
            or not dispatcher.composes
            or self.state not in (ModelState.READY, ModelState.UNAVAILABLE)
        ):
            return
        problem = dispatcher.recheck(services.config_of)
        if problem is None:
            self.state, self.reason = ModelState.READY, ""
        else:
            self.state, self.reason = ModelState.UNAVAILABLE, problem

    def instance_failed(self, failure: InstanceFailure) -> None:
        """An instance can serve no more (its backend said so): the version is UNAVAILABLE with the reason, new
        requests are refused with it (503), and a load of the version brings it back."""
        if self.failure is not None or self.state not in (ModelState.LOADING, ModelState.READY):
            return
        self.failure = failure
        self.state = ModelState.UNAVAILABLE
        self.reason = f"instance '{failure.instance_name}' failed: {failure.reason}"
        log.error("model '%s' version %s is unavailable: %s", self.name, self.version, self.reason)

    async def _warm_up(self) -> None:
        for sample in self.config.model_warmup:
            inputs = warmup_inputs(self.config, sample)
            size = sample.batch_size if self.config.max_batch_size > 0 else 1
            request = InferenceRequest(self.name, inputs, self.version, batch_size=size, protocol="warmup")
            for instance in self.instances:
                for _ in range(max(sample.count, 1)):
                    self._check_cancelled()  # an unload does not wait for a long warm-up to finish
                    await instance.execute([request], [size])

    def cancel_drain(self) -> None:
        self._stop_draining.set()

    def live_sequences(self) -> int:
        return self.dispatcher.live_sequences if self.dispatcher is not None else 0

    def holds_sequence(self, request: InferenceRequest) -> bool:
        """Whether `request` continues a sequence live on this version (it must run here, even while it drains)."""
        dispatcher = self.dispatcher
        return (
            dispatcher is not None
            and not request.sequence_start
            and request.sequence_id not in (0, "")
            and dispatcher.knows(request.sequence_id)
        )

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        if not self.residency.resident and self.state is ModelState.READY and self.budget is not None:
            await self.wait_resident()
        self.residency.touch()
        draining = self.state is ModelState.UNLOADING and self.holds_sequence(request)
        if (self.state is not ModelState.READY and not draining) or self.dispatcher is None:
            because = f": {self.reason}" if self.reason and self.state is ModelState.UNAVAILABLE else ""
            raise Unavailable(f"model '{self.name}' version {self.version} is not ready{because}")
        if request.caller is None:  # a model that keeps state per caller (the llm prefix cache) reads it there
            request.caller = current_caller.get()
        if not self.inflight:  # an Event method call a request cost: only the first in flight clears it
            self._drained.clear()
        self.inflight += 1
        try:
            response = await self.dispatcher.submit(request)
        finally:
            self.inflight -= 1
            if not self.inflight:
                self._drained.set()
                if self.budget is not None:
                    self.budget.idle()
        if request.stream is not None:  # the version keeps serving it until its final response
            self.open_streams += 1
            self._streams_closed.clear()
            request.stream.when_final(self._stream_ended)
        return response

    def _stream_ended(self, _: Any) -> None:
        self.open_streams -= 1
        if not self.open_streams:
            self._streams_closed.set()

    async def unload(self) -> None:
        """Stop new traffic, let in-flight requests finish, then release the runtime."""
        self.state = ModelState.UNLOADING
        if self.residency.waking is not None:  # a load on demand under way stops at its next step
            self.cancel()
            await asyncio.wait([self.residency.waking])
        if self.live_sequences():
            # live sequences finish here (new ones start on the version that replaced this one), within a limit
            await self._wait_or_stop(self.dispatcher.sequences_ended(), "live sequences")
        await self._drained.wait()
        if self.open_streams:
            # open streams (a generation under way) finish on this version, within the same limit as sequences
            await self._wait_or_stop(self._streams_closed.wait(), f"{self.open_streams} open streams")
        if self.dispatcher is not None:
            await self.dispatcher.stop()
        await self._release()
        self.state = ModelState.UNAVAILABLE
        self.reason = "unloaded"

    async def _wait_or_stop(self, ended: Awaitable[Any], what: str) -> None:
        """Until `ended`, the server stopping, or SEQUENCE_DRAIN_SECONDS (then unload anyway, with a warning)."""
        tasks = [asyncio.ensure_future(ended), asyncio.ensure_future(self._stop_draining.wait())]
        done, pending = await asyncio.wait(tasks, timeout=SEQUENCE_DRAIN_SECONDS, return_when="FIRST_COMPLETED")
        for task in pending:
            task.cancel()
        if not done:
            log.warning(
                "model '%s' version %s unloads with %s after %s s",
                self.name,
                self.version,
                what,
                SEQUENCE_DRAIN_SECONDS,
            )

    def abort(self) -> None:
        """Stop every instance's out-of-process work at once (see Backend.abort); never blocks."""
        for instance in list(self.instances):
            instance.backend.abort()

    async def _release(self) -> None:
        for instance in self.instances:
            await asyncio.to_thread(instance.stop)
            await asyncio.to_thread(instance.backend.unload)
        released = bool(self.instances)
        self.instances = []
        if self.budget is not None:
            self.budget.released(self)
        if released:
            await asyncio.to_thread(release_memory)


@dataclass
class ModelEntry:
    """Every version of one model the engine knows, which one takes unversioned traffic, and past failures."""

    name: str
    versions: dict[int, ServedVersion] = field(default_factory=dict)
    active: int | None = None
    failures: dict[int, str] = field(default_factory=dict)
    error: str = ""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    loading: set[ServedVersion] = field(default_factory=set)
    draining: set[ServedVersion] = field(default_factory=set)  # retired versions finishing their work


class ModelManager:
    """Loads, swaps and unloads model versions; the only writer of which version serves."""

    def __init__(
        self,
        gpus: int = 0,
        services: Any = None,
        sequence_limits: SequenceLimits | None = None,
        budget: MemoryGovernor | None = None,
    ) -> None:
        self.gpus = gpus
        self.budget = budget or MemoryGovernor()  # unbounded unless the server sets a budget: footprints all the same
        self.budget.needed_by_ensembles = lambda: ensemble_steps(self.models)
        self.sequence_limits = sequence_limits or SequenceLimits()  # INFERA_SEQUENCE_*, for sequence models
        self.services = services  # what model code may call on (BLS, custom metrics), handed to each instance
        self.models: dict[str, ModelEntry] = {}
        self._draining_tasks: set[asyncio.Task] = set()
        self._ensembles: dict[str, tuple] = {}  # ensemble name -> the arguments of its last load
        # asked before a load retires versions: raises when something (a traffic policy) still needs one
        self.keeps_versions: Any = None
        self._refreshing = False
        self._stopping = False

    async def load(
        self,
        config: ModelConfig,
        version_paths: dict[int, Path],
        active: int | None = None,
        *,
        configs: dict[int, ModelConfig] | None = None,
    ) -> None:
        """Serve exactly these versions: load new ones, swap, drain and unload the rest.

        Each version runs with its own config from `configs` when given there, else with `config`. A failure
        leaves what was serving untouched and raises LoadError naming the model and the version.
        """
        name = config.name
        if not version_paths:
            raise LoadError("it has no version to load", model=name)
        if config.backend_name == "ensemble":  # kept to load again once the models it needs arrive
            self._ensembles[name] = (config, dict(version_paths), active, configs)
        if self.keeps_versions is not None:
            self.keeps_versions(name, set(version_paths))
        entry = self.models.setdefault(name, ModelEntry(name))
        async with entry.lock:
            kept: dict[int, ServedVersion] = {}
            fresh: list[ServedVersion] = []
            for version, path in sorted(version_paths.items()):
                wanted = (configs or {}).get(version, config)
                current = entry.versions.get(version)
                if (
                    current
                    and current.state is ModelState.READY
                    and current.path == Path(path)
                    and current.config == wanted
                ):
                    kept[version] = current
                    continue
                served = ServedVersion(wanted, version, path, self.budget)
                entry.loading.add(served)
                try:
                    await served.load(self.gpus, self.services, self.sequence_limits)
                except Exception as exc:  # noqa: BLE001 - any runtime failure is a load failure with its reason
                    reason = without_folders(
                        exc.reason if isinstance(exc, LoadError) else str(exc), Path(path).parent.parent
                    )
                    entry.failures[version] = reason
                    for done in fresh:
                        await done.unload()
                    if isinstance(exc, LoadError) and exc.about_model:  # typed already (MemoryBudgetExceeded)
                        raise
                    raise LoadError(reason, model=name, version=version) from exc
                finally:
                    entry.loading.discard(served)
                fresh.append(served)
                kept[version] = served
                entry.failures.pop(version, None)
            retired = [v for k, v in entry.versions.items() if kept.get(k) is not v]
            entry.versions = kept
            entry.active = active if active in kept else max(kept)
            entry.error = ""
            log.info("model '%s' serving versions %s (active %s)", name, sorted(kept), entry.active)
        await self._retire(entry, retired)
        if config.backend_name != "ensemble":
            await self.refresh_ensembles()

    async def refresh_ensembles(self) -> None:
        """After a model changed: loaded ensembles check their composing models again (UNAVAILABLE with the reason,
        or READY), and ensembles that could not load for want of a model are loaded again."""
        if self._refreshing or self._stopping or self.services is None:
            return
        self._refreshing = True
        try:
            for name, arguments in list(self._ensembles.items()):
                entry = self.models.get(name)
                if entry is None:
                    continue
                for served in entry.versions.values():
                    served.recheck_ensemble(self.services)
                if entry.failures and not entry.versions:
                    try:
                        await self.load(*arguments[:3], configs=arguments[3])
                    except LoadError as exc:
                        log.info("ensemble '%s' still cannot serve: %s", name, exc.reason)
        finally:
            self._refreshing = False

    async def _retire(self, entry: ModelEntry, retired: list[ServedVersion], wait: bool = False) -> None:
        """Unload versions that no longer serve. One with live sequences drains in the background: its sequences
        still reach it until they end (or SEQUENCE_DRAIN_SECONDS pass), and the caller does not wait for that."""
        for old in retired:
            entry.draining.add(old)
            if old.live_sequences() and not wait:
                task = asyncio.get_running_loop().create_task(self._drain(entry, old))
                self._draining_tasks.add(task)
                task.add_done_callback(self._draining_tasks.discard)
            else:
                await self._drain(entry, old)

    async def _drain(self, entry: ModelEntry, old: ServedVersion) -> None:
        try:
            await old.unload()
        finally:
            entry.draining.discard(old)

    async def unload(self, name: str) -> None:
        """Unload every version of a model after its in-flight requests finish."""
        entry = self.models.get(name)
        if entry is None:
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        for loading in list(entry.loading):
            loading.cancel()  # a load holding the lock (a long warm-up) stops at its next step
        async with entry.lock:
            retired = list(entry.versions.values())
            entry.versions = {}
            entry.active = None
            entry.failures.clear()
            entry.error = ""
        for old in retired:
            old.cancel_drain()  # an unload ends live sequences; only a switch lets them finish
        await self._retire(entry, retired, wait=True)
        self._ensembles.pop(name, None)
        await self.refresh_ensembles()

    def status(self, name: str) -> ModelStatus:
        """The typed state of `name` (no versions when the engine has never heard of it)."""
        entry = self.models.get(name)
        if entry is None:
            return ModelStatus(name)
        versions = {
            number: VersionStatus(number, ModelState.UNAVAILABLE, reason) for number, reason in entry.failures.items()
        }
        for number, served in entry.versions.items():
            memory = served.residency.status() if served.config.backend_name != "ensemble" else None
            versions[number] = VersionStatus(number, served.state, served.reason, memory)
        return ModelStatus(name, dict(sorted(versions.items())), entry.active, entry.error)

    def forget(self, name: str) -> None:
        """Drop every trace of a model that has nothing loaded (its failures and error too)."""
        entry = self.models.get(name)
        if entry is not None and not entry.versions and not entry.loading:
            del self.models[name]

    def record_error(self, name: str, reason: str) -> None:
        """Remember why a model could not even reach a version load (bad config, missing files)."""
        self.models.setdefault(name, ModelEntry(name)).error = reason

    def set_active(self, name: str, version: int) -> None:
        entry = self.models.get(name)
        if entry is None or version not in entry.versions:
            raise ModelNotFound(f"Request for unknown model: '{name}' version {version} is not found")
        entry.active = version

    def route(self, request: InferenceRequest) -> ServedVersion:
        """The version that takes `request`: a retired version still running its sequence, else as `get` says."""
        entry = self.models.get(request.model_name)
        if entry is not None and entry.draining and request.model_version is None:
            for served in entry.draining:
                if served.holds_sequence(request):
                    return served
        return self.get(request.model_name, request.model_version)

    def get(self, name: str, version: int | None = None) -> ServedVersion:
        """The version that takes this request: the named one, or the active one."""
        entry = self.models.get(name)
        if entry is None or (not entry.versions and not entry.failures and not entry.error):
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        if version is None:
            version = entry.active
            if version is None:
                reason = entry.error or "; ".join(f"version {v}: {r}" for v, r in sorted(entry.failures.items()))
                raise Unavailable(f"model '{name}' has no version ready" + (f": {reason}" if reason else ""))
        served = entry.versions.get(version)
        if served is None:
            if version in entry.failures:
                raise Unavailable(f"model '{name}' version {version} is not ready: {entry.failures[version]}")
            raise ModelNotFound(f"Request for unknown model: '{name}' version {version} is not found")
        return served

    def abort(self) -> None:
        """Stop the out-of-process work of every version, loaded, loading or draining, at once (never blocks)."""
        for entry in list(self.models.values()):
            for served in [*entry.versions.values(), *entry.loading, *entry.draining]:
                served.abort()

    async def stop(self) -> None:
        self._stopping = True
        for entry in self.models.values():
            for old in list(entry.draining):
                old.cancel_drain()
        for name in list(self.models):
            entry = self.models[name]
            if entry.versions:
                await self.unload(name)
        if self._draining_tasks:
            await asyncio.wait(list(self._draining_tasks))
