"""The engine's facade: a model repository, the versions it serves, and inference on them."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from engine import __version__
from engine.config.model_config import ModelConfig
from engine.config.text_format import config_to_dict
from engine.errors import Forbidden, InferaError, ModelNotFound
from engine.monitoring.custom_metrics import CustomMetrics
from engine.monitoring.log_settings import LogSettings
from engine.monitoring.tracing import Tracer
from engine.protocol.shared_memory import SharedMemoryRegistry
from engine.serving import admission
from engine.serving.admission import SYSTEM, Principal
from engine.serving.devices import gpu_count
from engine.serving.lifecycle import ModelManager, ServedVersion
from engine.serving.memory_budget import BudgetEvent, MemoryGovernor
from engine.serving.model_loading import ModelLoader, config_override
from engine.serving.model_services import ModelServices
from engine.serving.model_status import ModelState, ModelStatus, VersionStatus
from engine.serving.repository import ModelRepository
from engine.serving.streams import ResponseStream
from engine.settings import EngineSettings
from engine.traffic.policies import TrafficPolicy, TrafficState, check_policy, policy_from_dict
from engine.traffic.router import RequestKey, RollbackListener, Routable, TrafficRouter, VersionRoute
from engine.types import InferenceRequest, InferenceResponse

log = logging.getLogger("infera.engine")

# Triton's server-metadata extension names for what Infera implements; cuda_shared_memory stays out (a CUDA region's
# registration is refused), so clients that read the list before using an extension see the truth
EXTENSIONS = [
    "classification",
    "sequence",
    "model_configuration",
    "model_repository",
    "schedule_policy",
    "model_repository(unload_dependents)",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


class InferenceServer:
    """What a front end talks to: load and unload models, look them up, run inference, read stats.

    Loads are asked for by a `Principal` (engine.serving.admission); whether a load runs code and whether its config
    fits the server's limits is decided here, for every entry point, with this server's `settings`.
    """

    def __init__(
        self,
        repository: Path | str | None = None,
        *,
        gpu_count: int | None = None,
        settings: EngineSettings | None = None,
    ) -> None:
        self.repository = ModelRepository(Path(repository)) if repository else None
        self.settings = settings if settings is not None else EngineSettings()
        self.custom_metrics = CustomMetrics()  # families model code declares (pb_utils.MetricFamily)
        self.model_services = ModelServices(self.infer, self.model_config, self.custom_metrics, self.infer_stream)
        gpus = _gpus(gpu_count)
        # the memory budget: footprints, on-demand loads and evictions (engine.serving.memory_budget)
        self.memory = MemoryGovernor.from_settings(self.settings.memory, gpus)
        self.manager = ModelManager(
            gpus=gpus,
            services=self.model_services,
            sequence_limits=self.settings.sequences,
            budget=self.memory,
        )
        self.name = self.settings.server_name
        self.version = __version__
        self.log_settings = LogSettings()  # Triton's logging extension, shared by the HTTP and gRPC front ends
        # system shared memory regions clients registered, each the registering caller's own
        self.shared_memory = SharedMemoryRegistry(self.settings.shared_memory)
        self.tracer = Tracer(  # Triton's trace extension
            self.settings.trace_dir,
            tensor_bytes=self.settings.trace.tensor_bytes,
            queue_traces=self.settings.trace.queue_traces,
            start_up=self.settings.trace_start_up.as_trace_settings(),  # INFERA_TRACE_CONFIG
        )
        self._started = False
        self.startup_failure: str | None = None  # why start-up failed: not ready for good, not "still loading"
        self._held = False  # started but kept not ready until set_ready()
        self._draining = False
        self.loader = ModelLoader(self.repository, self.manager, self.settings, self.admit)
        self.router = TrafficRouter(self.manager)  # each request's version, and the traffic policies in force
        self.manager.keeps_versions = self.router.keeps

    async def start(self, load_models: bool = True, *, ready: bool = True) -> None:
        """Start serving; with `load_models`, load every model in the repository (failures are logged).

        Ready (Triton's /v2/health/ready) only once that first load is over, so a load balancer sends no
        traffic to a replica that would still answer "unknown model"; with `ready=False` only once `set_ready()`
        is called too (the console first puts the registry's versions in place).
        """
        self.model_services.bind(asyncio.get_running_loop())
        self._draining = False
        self._held = not ready
        self.startup_failure = None
        try:
            await self._load_repository(load_models)
        except Exception as exc:
            self.failed_to_start(f"{type(exc).__name__}: {exc}")
            raise
        self._started = True

    async def _load_repository(self, load_models: bool) -> None:
        """Every model of the repository, each on its own: one that fails is logged and marked, the others load."""
        if load_models and self.repository is not None:
            for name in self.repository.model_names():
                try:
                    await self.load_model(name)
                except InferaError as exc:
                    log.error("%s", exc.message)
                except Exception as exc:  # a broken stored model never takes the server down: it alone fails
                    log.exception("model '%s' failed to load at start-up", name)
                    self.manager.record_error(name, f"{type(exc).__name__}: {exc}")

    def failed_to_start(self, reason: str) -> None:
        """Start-up failed (here, or in what the process starts around the engine): not ready until a start
        succeeds, and /v2/health/ready says so with 503 rather than the 400 of a server still loading."""
        self.startup_failure = reason

    def set_ready(self) -> None:
        """Ready from now on (after a `start(ready=False)`), unless draining."""
        self._held = False

    def drain(self) -> None:
        """The server is going away: not ready from now on (in-flight and new requests are still served)."""
        self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    def abort(self) -> None:
        """Stop every model's out-of-process work (python stubs) at once; safe from a signal handler."""
        self.manager.abort()

    async def stop(self, grace_seconds: float | None = None) -> None:
        """Unload every model after its in-flight requests; a batch still running after `grace_seconds` (None:
        no limit) is aborted (Backend.abort), and the unload goes on without it."""
        self._started = False
        stopping = asyncio.ensure_future(self._stop())
        if grace_seconds is not None:
            done, _ = await asyncio.wait({stopping}, timeout=max(grace_seconds, 0.0))
            if not done:
                log.warning("models still busy after the shutdown grace of %.0f s: stopping them now", grace_seconds)
                self.abort()
        await stopping

    async def _stop(self) -> None:
        await self.router.wait_for_shadows()
        await self.manager.stop()
        self.shared_memory.close()
        self.loader.close()

    def is_live(self) -> bool:
        return True

    def is_ready(self) -> bool:
        return self._started and not self._held and not self._draining

    def check_admissible(
        self,
        name: str,
        version_dir: Path,
        config: ModelConfig | None,
        *,
        caller: Principal,
        override: dict | None = None,
    ) -> admission.Admissible:
        """The admissibility check of a version from outside (who asks, its code, this server's limits), made once:
        a caller that records a version before trial-loading it checks first and hands the result to `admit`."""
        return admission.check(name, Path(version_dir), config, caller, self.settings, override)

    def check_config(
        self, name: str, version_dir: Path, config: ModelConfig, *, caller: Principal
    ) -> admission.Admissible:
        """An edited config for a stored version, checked as its load would check it with nothing loaded
        (engine.serving.admission.check_config); its effective config is what `admit` then trial-loads."""
        effective = admission.check_config(name, Path(version_dir), config, caller, self.settings)
        return admission.Admissible(name, effective, caller)

    def admit_blocking(
        self,
        name: str,
        version_dir: Path,
        config: ModelConfig | None = None,
        *,
        caller: Principal,
        override: dict | None = None,
        checked: admission.Admissible | None = None,
    ) -> ModelConfig:
        """`admit` for a caller on a worker thread (the console's registry): blocks that thread, not the loop.

        The one door every version from outside comes in by: trial-loaded against this machine's GPUs, the ones
        this server places instances on."""
        return admission.admit(
            name,
            Path(version_dir),
            config,
            caller=caller,
            settings=self.settings,
            gpus=self.manager.gpus,
            override=override,
            checked=checked,
        )

    async def admit(
        self,
        name: str,
        version_dir: Path,
        config: ModelConfig | None = None,
        *,
        caller: Principal,
        override: dict | None = None,
        checked: admission.Admissible | None = None,
    ) -> ModelConfig:
        """The effective config of a version from outside, trial-loaded in the sandbox (engine.serving.admission)."""
        return await asyncio.to_thread(
            self.admit_blocking, name, version_dir, config, caller=caller, override=override, checked=checked
        )

    async def load_model(
        self,
        name: str,
        *,
        config: dict | str | None = None,
        files: dict[str, bytes] | None = None,
        versions: dict[int, Path] | None = None,
        version_configs: dict[int, ModelConfig] | None = None,
        active_version: int | None = None,
        caller: Principal = SYSTEM,
    ) -> None:
        """Load (or reload) a model: from the repository, from explicit version folders, or from sent files.

        The name and any sent file paths are checked before anything touches the disk. `version_configs` gives
        versions their own configs (the registry keeps one per version). Raises Forbidden/CodeRefused when the
        caller may not, InvalidArgument for a bad name or path, LoadError(model, version, reason) otherwise (an
        ensemble that would call itself, directly or through others, among them).
        """
        await self._load_model(
            name,
            config=config,
            files=files,
            versions=versions,
            version_configs=version_configs,
            active_version=active_version,
            caller=caller,
            chain=frozenset(),
        )

    async def _load_model(self, name: str, **load: Any) -> None:
        """`load_model`'s keywords and the ensembles loading it, to the loader (engine.serving.model_loading)."""
        self.model_services.bind(asyncio.get_running_loop())
        await self.loader.load(name, **load)

    async def unload_model(self, name: str, *, caller: Principal = SYSTEM) -> None:
        """Unload every version after in-flight requests finish; a model loaded from sent files is forgotten."""
        if not caller.may_change_models:
            raise Forbidden(f"'{caller.name}' may not unload models ('{name}')")
        await self.manager.unload(name)
        self.router.forget(name)
        sent = self.loader.forget_sent_files(name)
        if sent or self.repository is None or name not in self.repository.model_names():
            self.manager.forget(name)  # nothing to show in the index: no folder in the repository

    def memory_use(self) -> dict:
        """The memory budget per pool (None: unbounded) and what loaded versions are charged there, in bytes."""
        governor = self.memory
        pools = sorted({"host", *governor.budgets})
        return {
            "pools": {pool: {"budget": governor.budgets.get(pool), "used": governor.used(pool)} for pool in pools},
            "loads": governor.loads,
            "evictions": governor.evictions,
        }

    def status(self, name: str) -> ModelStatus:
        """Typed per-version states and reasons of one model (empty when the engine does not know it)."""
        return self.manager.status(name)

    def set_active_version(self, name: str, version: int) -> None:
        self.manager.set_active(name, version)

    def get_model(self, name: str, version: int | None = None) -> ServedVersion:
        return self.manager.get(name, version)

    def model_ready(self, name: str, version: int | None = None) -> bool:
        try:
            return self.manager.get(name, version).state is ModelState.READY
        except InferaError:
            return False

    def model_metadata(self, name: str, version: int | None = None) -> dict:
        served = self.manager.get(name, version)
        entry = self.manager.models[name]
        config = served.config
        batch = [-1] if config.max_batch_size > 0 else []
        return {
            "name": name,
            "versions": [str(v) for v in sorted(entry.versions)],
            "platform": config.platform or config.backend_name,
            "inputs": [{"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)} for t in config.input],
            "outputs": [{"name": t.name, "datatype": t.datatype, "shape": batch + list(t.dims)} for t in config.output],
        }

    def model_config(self, name: str, version: int | None = None) -> ModelConfig:
        return self.manager.get(name, version).config

    def model_config_dict(self, name: str, version: int | None = None) -> dict:
        return config_to_dict(self.model_config(name, version))

    def repository_index(self, ready_only: bool = False) -> list[dict]:
        """Every model of the repository and every loaded version, with state and reason (Triton's index)."""
        rows: dict[tuple[str, str], dict] = {}
        if self.repository is not None:
            for name in self.repository.model_names():
                rows[(name, "")] = {"name": name}
        for name, entry in self.manager.models.items():
            rows.pop((name, ""), None)
            for version, served in entry.versions.items():
                row = {"name": name, "version": str(version), "state": served.state.value}
                if served.reason:
                    row["reason"] = served.reason
                rows[(name, str(version))] = row
            for version, reason in entry.failures.items():
                if version not in entry.versions:
                    rows[(name, str(version))] = {
                        "name": name,
                        "version": str(version),
                        "state": "UNAVAILABLE",
                        "reason": reason,
                    }
            if not entry.versions and not entry.failures:
                rows[(name, "")] = {"name": name, "state": "UNAVAILABLE", "reason": entry.error or "unloaded"}
        result = [rows[k] for k in sorted(rows)]
        if ready_only:
            result = [r for r in result if r.get("state") == "READY"]
        return result

    def served_versions(self) -> list[ServedVersion]:
        """Every loaded version (for stats and metrics)."""
        return [s for entry in self.manager.models.values() for s in entry.versions.values()]

    def statistics(self, name: str | None = None, version: int | None = None) -> dict:
        if name is None:
            served = sorted(self.served_versions(), key=lambda s: (s.name, s.version))
        elif version is None:
            self.manager.get(name)  # raises for an unknown model
            served = sorted(self.manager.models[name].versions.values(), key=lambda s: s.version)
        else:
            served = [self.manager.get(name, version)]
        return {"model_stats": [s.stats.to_dict() for s in served]}

    def route(self, request: Routable) -> VersionRoute:
        """The one version `request` runs on (see engine.traffic.router): a front end asks before it decodes."""
        return self.router.route(request)

    def infer(self, request: InferenceRequest, route: VersionRoute | None = None) -> Awaitable[InferenceResponse]:
        """The response to `request`, on `route` (routed here when the caller has not: model code, ensembles)."""
        return self.router.infer(route if route is not None else self.router.route(request), request)

    async def infer_stream(self, request: InferenceRequest, route: VersionRoute | None = None) -> ResponseStream:
        """Run a request whose responses are read as a stream: a decoupled model's (any number, sent as the model
        makes them), or any other model's (exactly one), on `route` (routed here when the caller has not)."""
        return await self.router.infer_stream(route if route is not None else self.router.route(request), request)

    # ---- traffic policies

    @property
    def traffic(self) -> dict[str, TrafficState]:
        """The models under a canary or shadow policy, and their policies' states."""
        return self.router.policies

    @property
    def _shadow_tasks(self) -> set[asyncio.Task]:
        return self.router.shadow_tasks

    @property
    def on_traffic_rollback(self) -> RollbackListener | None:
        """Called as (model, the policy that was rolled back, why) when a guard rolls a policy back."""
        return self.router.on_rollback

    @on_traffic_rollback.setter
    def on_traffic_rollback(self, listener: RollbackListener | None) -> None:
        self.router.on_rollback = listener

    @property
    def on_memory_event(self) -> Callable[[BudgetEvent], None] | None:
        """Called on the loop with each load on demand and each eviction the memory budget makes (BudgetEvent)."""
        return self.memory.on_event

    @on_memory_event.setter
    def on_memory_event(self, listener: Callable[[BudgetEvent], None] | None) -> None:
        self.memory.on_event = listener

    def set_traffic_policy(self, name: str, policy: TrafficPolicy, *, caller: Principal = SYSTEM) -> None:
        """Put a traffic policy in force for `name` (InvalidArgument when its versions are not READY,
        IncompatibleVersion when one takes other inputs or gives other outputs than the active version)."""
        if not caller.may_change_models:
            raise Forbidden(f"'{caller.name}' may not change the traffic of model '{name}'")
        self.router.set_policy(name, policy)

    def traffic_status(self, name: str) -> dict:
        """The policy in force for `name`, the shadow comparison, and the last automatic rollback."""
        return self.router.status(name)


def _gpus(count: int | None) -> int:
    return gpu_count() if count is None else count


__all__ = [
    "InferenceServer",
    "ModelNotFound",
    "ModelState",
    "ModelStatus",
    "Principal",
    "RequestKey",
    "VersionRoute",
    "SYSTEM",
    "TrafficPolicy",
    "VersionStatus",
    "check_policy",
    "config_override",
    "policy_from_dict",
]
