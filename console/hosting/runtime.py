"""What this process runs, built once and started in one stated order: the console's runtime.

The ASGI application (composition.py) owns one Runtime and puts it in every connection's scope under
RUNTIME_KEY, so views, the API and WebSocket consumers reach the engine through `runtime_of(...)`
(console/runtime_of.py) and never through a module global. Start-up order, each step after the one before (a
worker of `serve --workers` without Redis first joins its host's other workers on the channel layer,
console/peers/layer.py, so change notices reach it):

0. the /v2 token cache listens for revoked tokens and changed users (console/accounts/revocations.py);
1. the model store exists (a new install starts with an empty store) and old staging leftovers are swept;
   this replica's heartbeat starts (console/registry/cluster: its row in the replica table, as INFERA_REPLICA_NAME);
2. the gRPC front end listens (INFERA_GRPC_PORT; its health answers "not serving" until the engine is ready);
3. the engine loads every model in the store;
4. under model control mode explicit, the models of --load-model (INFERA_LOAD_MODELS) are asked to serve; the
   reconciler converges the engine on the registry once (the active versions serve, traffic policies in force;
   /v2/health/ready turns 200 at the end, so a balancer never sends traffic to a version about to be replaced),
   then follows changes (and records the engine's automatic traffic rollbacks); under model control mode poll
   the RepositoryPoller (console/registry/poller.py) applies INFERA_MODEL_REPOSITORY once, then at its interval;
   the analysis runner starts taking queued analyses (console/analyzer/runner.py);
5. the sampler takes a snapshot a second and publishes it to the dashboards; in a cluster (Redis, or workers) also
   to the other processes, whose snapshots it hears and merges (console/monitoring/cluster.py); the usage recorder
   writes the tokens callers used to the database every few seconds (console/accounts/usage.py).

Stopping runs the other way round, the gRPC server finishing its in-flight calls before the engine stops. A graceful
shutdown drains first (`drain()`, shutdown.py): from the first SIGTERM every step has until one deadline,
INFERA_SHUTDOWN_GRACE_SECONDS later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from console.accounts.budgets import budget_gate
from console.accounts.inference_auth import TokenCache, make_v2_authenticator
from console.accounts.revocations import RevocationListener
from console.accounts.usage import UsageRecorder
from console.analyzer.runner import AnalysisRunner
from console.config import InferaSettings
from console.hosting.shutdown import Connections
from console.monitoring.cluster import ClusterListener, ClusterView
from console.monitoring.live import GroupPublisher, cluster_enabled
from console.peers.identity import ProcessIdentity
from console.peers.layer import LocalPeerLayer
from console.registry.cluster.heartbeat import Heartbeat
from console.registry.poller import RepositoryPoller
from console.registry.reconciler import Reconciler
from console.registry.services.v2_actions import load_at_start_up
from console.registry.store import store_at
from console.registry.v2_hooks import RegistryRepositoryControl
from engine.api import GrpcFrontEnd, InferenceServer, MetricsApp, MetricsSampler, OpenAIApp, ServiceLifespan, V2App

logger = logging.getLogger("console.runtime")

START_ORDER = (
    "peers",
    "credentials",
    "store",
    "heartbeat",
    "grpc",
    "engine",
    "reconcile",
    "poll",
    "follow",
    "monitoring",
)


class Runtime:
    """The engine, its front ends, the reconciler, the sampler and the /v2 authenticator of one serving process."""

    def __init__(
        self, settings: InferaSettings, *, listen_host: str | None = None, identity: ProcessIdentity | None = None
    ) -> None:
        self.settings = settings
        self.identity = identity or ProcessIdentity.single(settings.replica_name)
        self.layer = get_channel_layer()
        self.store = store_at(settings.model_store)
        self.server = InferenceServer(settings.model_store, settings=settings.engine)
        self.heartbeat = Heartbeat(
            settings.replica_name,
            settings.listen_address,
            float(settings.reconcile_seconds),
            former=self.identity.former_name,
        )
        self.reconciler = Reconciler(
            self.server, float(settings.reconcile_seconds), settings.replica_name, store=self.store
        )
        control = settings.engine.model_control
        # poll mode: the watched folder, applied by one process (the first worker of a replica with workers)
        self.poller = (
            RepositoryPoller(control.repository, float(control.poll_seconds), self.reconciler)
            if control.mode == "poll" and control.repository is not None and not self.identity.worker
            else None
        )
        # an automatic traffic rollback is audited and becomes the desired state
        self.server.on_traffic_rollback = self.reconciler.traffic_rolled_back
        # loads on demand and evictions are audited as the engine's own actions
        self.server.on_memory_event = self.reconciler.memory_event
        self.analyzer = AnalysisRunner(self.server)  # analyses queued for this installation, one at a time
        self.token_cache = TokenCache(ttl=settings.token_check_seconds, grace=settings.token_grace_seconds)
        self.revocations = RevocationListener(self.token_cache)
        self.authenticate = make_v2_authenticator(
            settings.inference_auth,
            listen_host,
            self.token_cache,
            open_repository=settings.open_repository_control,
            open_code=settings.open_repository_control_allows_code,
        )
        # token budgets on /v1 and generate: counted in Redis when there is one (every replica), else in this process
        self.budgets = budget_gate(settings.redis_url)
        self.usage = UsageRecorder(self.budgets.ledger)  # what callers used, a minute at a time, for the console
        self.v2 = V2App(
            self.server,
            authenticate=self.authenticate,
            repository_control=RegistryRepositoryControl(self.reconciler),
            trusted_origins=settings.csrf_trusted_origins,
            budgets=self.budgets,
        )
        grpc = settings.engine.grpc
        self.grpc = (
            GrpcFrontEnd(
                self.server,
                grpc,
                host=listen_host or "127.0.0.1",
                authenticate=self.authenticate,
                repository_control=self.v2.repository_control,
                budgets=self.budgets,
            )
            if grpc.port
            else None
        )
        self.sampler = MetricsSampler(self.server, use_nvml=not settings.engine.disable_nvml)
        # the other replicas' (or workers') snapshots, merged with ours for the dashboards
        self.cluster = ClusterView(
            self.identity, self.sampler, enabled=cluster_enabled(self.layer, self.identity.has_workers)
        )
        self.cluster_listener = ClusterListener(self.cluster, self.layer)
        # /metrics is answered here, /v1 (OpenAI-compatible) by its app, every other engine path by /v2
        openai = OpenAIApp(
            self.server,
            self.v2,
            authenticate=self.authenticate,
            trusted_origins=settings.csrf_trusted_origins,
            budgets=self.budgets,
        )
        self.engine_app = MetricsApp(
            self.server,
            self.sampler,
            fallback=openai,
            replica=self.identity.replica,
            workers=self.cluster.worker_metrics if self.identity.has_workers else None,
        )
        self.engine_app.registry.register(self.budgets.ledger)  # infera_llm_usage_tokens_total{user, kind}
        # `serve` (uvicorn or daphne) names where it listens: that process serves, so it freezes start-up's objects
        self.lifespan = ServiceLifespan(
            self.start, self.stop, wait_for_start=False, serving_process=listen_host is not None
        )
        self.connections = Connections()
        self.started: list[str] = []
        self.startup_failure: str | None = None
        self.deadline: float | None = None  # time.monotonic() by which a shutdown that began must be over
        self._grpc_stopping: asyncio.Future | None = None
        self._unfinished: set[asyncio.Future] = set()  # drain steps still running when the grace ran out

    async def start(self) -> None:
        """Run the start-up steps in START_ORDER; a failure is kept for the home page and re-raised."""
        self.startup_failure = None
        try:
            if self.identity.has_workers and isinstance(self.layer, LocalPeerLayer):
                await self.layer.join(self.identity.name)
                self.started.append("peers")
            await self.revocations.start()
            self.started.append("credentials")
            self.settings.model_store.mkdir(parents=True, exist_ok=True)
            self.store.sweep()
            self.started.append("store")
            await self.heartbeat.start()
            self.started.append("heartbeat")
            if self.grpc is not None:
                await self.grpc.start()
                self.started.append("grpc")
            logger.info("engine starting: loading every model in the model store")
            await self.server.start(load_models=True, ready=False)
            self.started.append("engine")
            try:
                await self._load_named_models()
                await self.reconciler.reconcile_once()
            except Exception:  # the database may be down: the periodic pass retries
                logger.exception("the start-up reconciliation failed; the periodic pass retries")
            self.started.append("reconcile")
            if self.poller is not None:
                await self.poller.start()  # the folder's models serve before the server says it is ready
                self.started.append("poll")
            self.server.set_ready()  # the registry's active versions serve before a balancer sends traffic
            self.reconciler.start()
            self.analyzer.start()
            self.started.append("follow")
            families = self.engine_app.collector.families_data if self.identity.has_workers else None
            self.sampler.subscribe(GroupPublisher(self.layer, cluster=self.cluster, metrics=families))
            self.sampler.start()
            if self.cluster.enabled:
                self.cluster_listener.start()
            self.usage.start()
            self.started.append("monitoring")
            logger.info("engine ready; monitoring every %.0f s, streaming to /ws/metrics/", self.sampler.interval)
        except Exception as exc:
            self.startup_failure = f"{type(exc).__name__}: {exc}"
            self.server.failed_to_start(self.startup_failure)  # ready answers 503 from now on, not "loading"
            raise

    async def _load_named_models(self) -> None:
        """Triton's --load-model: under explicit model control, the named models are asked to serve (audited)."""
        control = self.settings.engine.model_control
        if control.mode == "explicit" and control.load_models:
            unknown = await database_sync_to_async(load_at_start_up)(control.load_models)
            for name in unknown:
                logger.error("--load-model: model '%s' is not registered; nothing to load", name)

    async def drain(self) -> None:
        """Begin a graceful shutdown: not ready, no model changes, no new gRPC calls, WebSockets told to go away."""
        if self.deadline is not None:
            return
        self.deadline = time.monotonic() + self.settings.engine.shutdown_grace_seconds
        logger.info(
            "draining: finishing in-flight requests for up to %d s, then unloading the models",
            self.settings.engine.shutdown_grace_seconds,
        )
        self.server.drain()
        # an analysis under way ends (FAILED), its temporary versions unloaded
        await self._within_grace("the analysis runner", self.analyzer.stop())
        if "poll" in self.started and self.poller is not None:
            self.started.remove("poll")
            await self._within_grace("the repository poller", self.poller.stop())
        if "follow" in self.started:
            self.started.remove("follow")
            await self._within_grace("the reconciler", self.reconciler.stop())
        if "grpc" in self.started and self.grpc is not None:
            self._grpc_stopping = asyncio.ensure_future(self.grpc.stop(self.grace_left()))
        await self._within_grace("closing the WebSockets", self.connections.drain())

    async def _within_grace(self, what: str, step: Awaitable[None]) -> None:
        """Await one step of the drain until the shutdown deadline at most. The drain goes on past a step that
        fails or hangs (a database call that never answers, say): what matters now is the requests in flight, and
        a process that exits when its grace is over."""
        task = asyncio.ensure_future(step)
        done, _ = await asyncio.wait({task}, timeout=self.grace_left())
        if not done:
            logger.warning("%s had not stopped at the end of the shutdown grace: the shutdown goes on", what)
            self._unfinished.add(task)  # held, not collected while it still runs
            return
        try:
            task.result()
        except Exception:
            logger.exception("stopping %s failed; the shutdown goes on", what)

    def grace_left(self) -> float:
        """Seconds until the shutdown deadline (the whole grace while no shutdown has begun)."""
        if self.deadline is None:
            return float(self.settings.engine.shutdown_grace_seconds)
        return max(self.deadline - time.monotonic(), 0.0)

    def abort(self) -> None:
        """Stop the python model stubs at once, for a process that exits without waiting; safe in a signal handler."""
        self.server.abort()

    async def stop(self) -> None:
        """Stop what started, last first: the sampler ends before the engine it reads; models still busy at the
        shutdown deadline are stopped."""
        if "monitoring" in self.started:
            await self.cluster_listener.stop()
            await self.sampler.stop()
        if "poll" in self.started and self.poller is not None:
            await self.poller.stop()
        if "follow" in self.started:
            await self.reconciler.stop()
        await self.analyzer.stop()
        if "grpc" in self.started and self.grpc is not None:
            # in-flight calls finish before the engine they use stops
            await (self._grpc_stopping or self.grpc.stop(self.grace_left()))
        await self.server.stop(grace_seconds=self.grace_left())
        if "monitoring" in self.started:
            await self.usage.stop()  # after the engine: the last requests' usage is counted by then
        if "heartbeat" in self.started:
            await self.heartbeat.stop()
        await self.revocations.stop()
        if "peers" in self.started and isinstance(self.layer, LocalPeerLayer):
            await self.layer.leave()
        self.started.clear()
        logger.info("models unloaded; the runtime has stopped")

    @property
    def state(self) -> str:
        """absent, loading, ready, stopping or failed, as the home page shows it."""
        if self.startup_failure:
            return "failed"
        if self.server.draining:
            return "stopping"
        return "ready" if self.server.is_ready() else "loading"
