"""Converge the engine on the database: load what should serve, switch the active version, unload the rest, and
put each model's traffic policy in force once its versions are there.

It runs in the serving process: once at start-up (a restart recovers every active model and its traffic policy),
whenever a "registry.changed" message arrives on the channel layer, and every INFERA_RECONCILE_SECONDS (a lost
message heals; while the database is down it backs off, doubling the wait up to 8 periods, and logs the outage
once). A version that fails to load is marked FAILED with the engine's reason and left out, and the
versions that serve keep serving: the engine swaps only after a load succeeds. When the engine's guard rolls a
policy back, the reconciler records it (audit event, desired state back to the active version) and does not put
the rolled-back policy in force again meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from console.layer_tasks import end_task
from console.outages import Outage, is_database_outage, is_idle_wait, is_transaction_conflict
from console.registry.desired import ModelPlan, mark_loading, read_plans, record_outcome
from console.registry.services.model_actions import record_engine_memory_action
from console.registry.services.notices import CHANGED, GROUP
from console.registry.services.traffic_actions import record_automatic_rollback
from console.registry.store import ModelStore
from engine.api import (
    BudgetEvent,
    InferaError,
    InferenceServer,
    LoadError,
    TrafficPolicy,
    parse_config_json,
    policy_from_dict,
)

logger = logging.getLogger("console.registry.reconciler")

DEFAULT_PERIOD_SECONDS = 10.0
MAX_BACKOFF_PERIODS = 8  # the longest wait between passes while the database is down, in periods
CONFLICT_RETRY_SECONDS = 0.2  # the wait before a pass again after a deadlock or serialization failure


class Reconciler:
    """Converges one engine on the registry: one pass at a time, remembering the plan each model was loaded with.

    `run()` is the loop: a pass, then wait for a change message or the period, until the engine stops. The v2
    repository control asks for a pass over one model (`reconcile_model`) and waits for it.
    """

    def __init__(
        self,
        server: InferenceServer,
        period: float = DEFAULT_PERIOD_SECONDS,
        replica: str = "",
        *,
        store: ModelStore | None = None,
    ) -> None:
        self.server = server
        self.period = period
        self.replica = replica or settings.INFERA.replica_name  # whose engine state it records
        self.store = store  # the Runtime's; None: the process's (get_store) at each pass
        self.wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._applied: dict[str, tuple] = {}
        self._task: asyncio.Task[None] | None = None
        self._listener: asyncio.Task[None] | None = None  # the loop's change messages, ended by stop()
        # model -> the policy its guard rolled back: kept out of force until a pass reads the desired state recorded
        self._rolled_back: dict[str, dict] = {}
        self._recorded: dict[str, dict] = {}  # those of them the database has recorded since the last pass began
        self._traffic_refusals: dict[str, str] = {}  # model -> why the engine refused its policy (logged once)
        self._recording: set[asyncio.Task[None]] = set()
        self.database = Outage("the database (registry reconciler)")
        self.channel_layer = Outage("the channel layer (registry change messages)")

    async def reconcile_once(self) -> None:
        """One full pass over every registered model, plus unloading models that were deleted."""
        async with self._lock:
            self._forget_recorded_rollbacks()
            plans = await database_sync_to_async(read_plans)(self.replica, store=self.store)
            for plan in plans:
                await self._converge(plan)
            registered = {plan.name for plan in plans}
            for name in [name for name in self._applied if name not in registered]:
                await self._forget(name)

    async def reconcile_model(self, name: str) -> None:
        """A pass over one model (the v2 repository control waits for it)."""
        async with self._lock:
            self._forget_recorded_rollbacks()
            plans = await database_sync_to_async(read_plans)(self.replica, name, store=self.store)
            if plans:
                await self._converge(plans[0])
            else:
                await self._forget(name)

    async def _converge(self, plan: ModelPlan) -> None:
        name = plan.name
        status = self.server.status(name)
        ready, serving = set(status.ready), status.serving
        if not plan.versions:
            if ready:
                logger.info("unloading model '%s': no version should serve", name)
                await self.server.unload_model(name)
            self._applied.pop(name, None)
            await database_sync_to_async(record_outcome)(self.replica, name, set(), {})
            return
        self._relax_traffic(plan)
        if ready == set(plan.versions) and self._applied.get(name) == plan.signature:
            if plan.active in ready and serving != plan.active:
                logger.info("model '%s': version %s takes traffic (was %s)", name, plan.active, serving)
                self.server.set_active_version(name, plan.active)
            await database_sync_to_async(record_outcome)(self.replica, name, ready, {})
            self._apply_traffic(plan)
            return
        await database_sync_to_async(mark_loading)(self.replica, name, set(plan.versions) - ready)
        failed = await self._load(plan, ready, serving)
        await database_sync_to_async(record_outcome)(self.replica, name, set(self.server.status(name).ready), failed)
        self._apply_traffic(plan)

    async def _load(self, plan: ModelPlan, ready: set[int], serving: int | None) -> dict[int, str]:
        """Load the plan, dropping each version that fails and trying again with the rest; returns the failures."""
        remaining = dict(plan.versions)
        failed: dict[int, str] = {}
        while remaining:
            # a failed active version must not hand traffic to whichever version is newest: keep what serves
            active = plan.active if plan.active in remaining else serving if serving in remaining else None
            configs = {n: parse_config_json(c) for n, c in plan.configs.items() if n in remaining}
            try:
                await self.server.load_model(
                    plan.name, versions=remaining, version_configs=configs, active_version=active
                )
            except LoadError as exc:
                logger.warning("%s", exc.message)
                if exc.version in remaining:
                    failed[exc.version] = exc.reason
                    del remaining[exc.version]
                    continue
                # the model as a whole failed (its config): the engine kept what it served, the rest failed
                failed.update({n: exc.message for n in remaining if n not in ready})
                return failed
            except InferaError as exc:
                logger.warning("%s", exc.message)
                failed.update({n: exc.message for n in remaining if n not in ready})
                return failed
            except Exception as exc:  # a model that breaks its load fails alone; the pass goes on with the others
                logger.exception("model '%s' failed to load", plan.name)
                failed.update({n: f"{type(exc).__name__}: {exc}" for n in remaining if n not in ready})
                return failed
            self._applied[plan.name] = ModelPlan(plan.name, remaining, plan.active, plan.configs).signature
            return failed
        return failed

    # ---- traffic policies

    def _relax_traffic(self, plan: ModelPlan) -> None:
        """Before versions change: a policy in force that the plan no longer allows (one of its versions leaves, or
        its shadow candidate becomes the active version) gives way to the active version first."""
        current = policy_from_dict(self.server.traffic_status(plan.name)["policy"])
        if current.mode == "active":
            return
        leaving = current.versions() - set(plan.versions)
        if not leaving and not (current.mode == "shadow" and current.candidate == plan.active):
            return
        with contextlib.suppress(InferaError):
            self.server.set_traffic_policy(plan.name, TrafficPolicy())
            logger.info("model '%s': traffic back to the active version while its versions change", plan.name)

    def _apply_traffic(self, plan: ModelPlan) -> None:
        """Put the plan's traffic policy in force when the engine has another; a refusal (a version still loading,
        say) is logged once and the next pass tries again."""
        name = plan.name
        try:
            desired = policy_from_dict(plan.traffic)
            wanted = desired.to_dict()
            if self._rolled_back.get(name) == wanted or self.server.traffic_status(name)["policy"] == wanted:
                return
            self.server.set_traffic_policy(name, desired)
        except InferaError as exc:
            if self._traffic_refusals.get(name) != exc.message:
                logger.warning("model '%s': traffic policy not in force yet: %s", name, exc.message)
            self._traffic_refusals[name] = exc.message
            return
        self._traffic_refusals.pop(name, None)
        logger.info("model '%s': %s traffic policy in force", name, desired.mode)

    def traffic_rolled_back(self, model: str, policy: TrafficPolicy, reason: str) -> None:
        """The engine's guard rolled `model`'s policy back (InferenceServer.on_traffic_rollback, on the event loop):
        record it in the audit log with the reason and set the desired state back to the active version."""
        rolled = policy.to_dict()
        self._rolled_back[model] = rolled  # not put in force again while the database still asks for it
        task = asyncio.get_running_loop().create_task(self._record_rollback(model, rolled, reason))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    def memory_event(self, event: BudgetEvent) -> None:
        """A load on demand or an eviction of the engine's memory budget (InferenceServer.on_memory_event, on the
        loop): audited as the engine's action. Loads asked for by the registry are audited where they are asked."""
        if event.action == "load" and event.cold_start_seconds is None:
            return
        detail = {"footprint_bytes": event.footprint}
        if event.cold_start_seconds is not None:
            detail["cold_start_ms"] = round(event.cold_start_seconds * 1000)
        task = asyncio.get_running_loop().create_task(self._record_memory(event, detail))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)

    async def _record_memory(self, event: BudgetEvent, detail: dict) -> None:
        try:
            await database_sync_to_async(record_engine_memory_action)(
                event.action, event.model, event.version, **detail
            )
        except Exception:  # the database may be down: the engine's action stands, unaudited
            logger.exception("model '%s': the engine's %s could not be audited", event.model, event.action)

    async def _record_rollback(self, model: str, rolled: dict, reason: str) -> None:
        try:
            await database_sync_to_async(record_automatic_rollback)(model, rolled, reason)
        except Exception:  # the database may be down: the policy stays out of force in this process
            logger.exception("model '%s': the automatic traffic rollback could not be recorded", model)
            return
        self._recorded[model] = rolled

    def _forget_recorded_rollbacks(self) -> None:
        """At the start of a pass: the plans it reads already hold the recorded rollbacks."""
        for model, rolled in self._recorded.items():
            if self._rolled_back.get(model) == rolled:
                del self._rolled_back[model]
        self._recorded.clear()

    async def wait_for_records(self) -> None:
        """Wait until the automatic rollbacks seen so far are recorded (tests, and stopping)."""
        if self._recording:
            await asyncio.gather(*self._recording, return_exceptions=True)

    async def _forget(self, name: str) -> None:
        """A model deleted from the registry leaves the engine too."""
        self._applied.pop(name, None)
        with contextlib.suppress(InferaError):
            logger.info("unloading model '%s': it is no longer registered", name)
            await self.server.unload_model(name)

    # ---- the loop

    def start(self) -> asyncio.Task[None]:
        """Run the loop as a task (once); it ends when the engine stops or `stop()` is awaited."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="registry-reconciler")
        return self._task

    async def stop(self) -> None:
        """Cancel the loop and its listener, wait for both to end, and for the rollbacks being recorded."""
        task, self._task = self._task, None
        await end_task(task)
        # ended here, not in the loop's `finally`: end_task may cancel the loop again while that waited on it
        listener, self._listener = self._listener, None
        await end_task(listener)
        await self.wait_for_records()

    async def run(self) -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel() if layer is not None else None  # one prefix: see monitoring/cluster.py
        listener = asyncio.create_task(self._listen(layer, channel)) if channel else None
        self._listener = listener
        try:
            while self.server.is_ready():
                self.wake.clear()
                if channel:
                    await self._join(layer, channel)
                delay = await self._pass()  # first: a pass cancelled by stop() leaves no waiter unawaited
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), delay)
        finally:
            if listener is not None:
                listener.cancel()  # stop() waits for it to end
            if channel:
                with contextlib.suppress(Exception):
                    await layer.group_discard(GROUP, channel)

    async def _pass(self) -> float:
        """One pass; the seconds to wait before the next unless woken (longer and longer while the database is down)."""
        try:
            await self.reconcile_once()
        except Exception as exc:  # a database or engine hiccup must not end the loop
            if is_transaction_conflict(exc):  # another replica's transaction won the race: again, soon
                logger.info("reconciliation lost a race with another transaction (%s); retrying", exc.__cause__)
                return CONFLICT_RETRY_SECONDS
            if not is_database_outage(exc):
                logger.exception("reconciliation failed; the next pass retries")
                return self.period
            self.database.failed(exc)
            return self.backoff(self.database.failures)
        self.database.recovered()
        return self.period

    def backoff(self, failures: int) -> float:
        """The wait after `failures` passes in a row found the database down: 1, 2, 4 ... up to 8 periods."""
        return self.period * min(2 ** max(failures - 1, 0), MAX_BACKOFF_PERIODS)

    async def _join(self, layer, channel: str) -> None:
        # renewed every pass: Redis expires group membership
        try:
            await layer.group_add(GROUP, channel)
        except Exception as exc:  # Redis down: relying on the period until it is back
            self.channel_layer.failed(exc)

    async def _listen(self, layer, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis down: the periodic pass carries on alone
                if is_idle_wait(exc):
                    continue
                self.channel_layer.failed(exc)
                await asyncio.sleep(self.period)
                continue
            self.channel_layer.recovered()
            if message.get("type") == CHANGED:
                self.wake.set()
