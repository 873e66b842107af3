"""grpc.health.v1 on the gRPC front end: the server's health open to all, a model's only to a caller with a token
where tokens are needed (so that nobody without one learns which model names exist), watchers capped and woken by one
poller instead of polling each on its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
from grpc_health.v1 import health_pb2

from engine.errors import InferaError, Unauthorized
from engine.frontend.grpc_calls import Binder, Call, parsed, peer_host, status_code
from engine.proto import grpc_messages as messages
from engine.serving.admission import Principal
from engine.settings import GrpcSettings

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer

HEALTH_SERVICE = "grpc.health.v1.Health"
HEALTH_METHODS = ("Check", "Watch")
HEALTH_POLL_SECONDS = 1.0  # how often the one health poller reads the watched states (not once per watcher)


class HealthService:
    """Check and Watch for the server ("") and each model by its name."""

    def __init__(self, server: InferenceServer, settings: GrpcSettings) -> None:
        self.server = server
        self.settings = settings
        self.watchers = HealthWatchers(self)

    def binders(self, binder: Callable[[str, Callable[[Call], grpc.RpcMethodHandler]], Binder]) -> dict[str, Binder]:
        check_class, answer_class = health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse

        def bind_check(call: Call) -> grpc.RpcMethodHandler:
            async def check(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                try:
                    request = parsed(check_class, raw)
                    self.check_access(request.service, call.principal)
                    status = self.status(request.service)
                except InferaError as exc:
                    await context.abort(status_code(exc), exc.message)
                if status is None:
                    await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service or model '{request.service}'")
                return answer_class(status=status)

            return grpc.unary_unary_rpc_method_handler(check, response_serializer=answer_class.SerializeToString)

        def bind_watch(call: Call) -> grpc.RpcMethodHandler:
            async def watch(raw: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                try:
                    request = parsed(check_class, raw)
                    self.check_access(request.service, call.principal)
                except InferaError as exc:
                    await context.abort(status_code(exc), exc.message)
                async for status in self.watchers.watch(request.service, peer_host(context.peer()), context):
                    yield answer_class(status=status)

            return grpc.unary_stream_rpc_method_handler(watch, response_serializer=answer_class.SerializeToString)

        return {
            f"/{HEALTH_SERVICE}/Check": binder("Check", bind_check),
            f"/{HEALTH_SERVICE}/Watch": binder("Watch", bind_watch),
        }

    def check_access(self, service: str, principal: Principal | None) -> None:
        """The server's own health is open to all; a model's needs a token where the server needs one, so that
        nobody without one learns which model names exist."""
        if principal is None and service not in ("", messages.SERVICE):
            raise Unauthorized("the health of a model needs an API token: send 'authorization: Bearer <key>'")

    def status(self, service: str, known: set[str] | None = None) -> int | None:
        """SERVING or NOT_SERVING for the server ("") or a model by name; None for a name nobody knows.

        `known`: the repository's model names, when the caller has read them already (one scan for many)."""
        serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        if service in ("", messages.SERVICE):
            return serving if self.server.is_ready() else not_serving
        if self.server.status(service).versions or service in (known if known is not None else self.model_names()):
            return serving if self.server.model_ready(service) else not_serving
        return None

    def model_names(self) -> set[str]:
        return {row["name"] for row in self.server.repository_index()}


class HealthWatchers:
    """grpc.health.v1 Watch calls: capped in all and per client address, woken by one poller's change event.

    One task reads the watched services' states every HEALTH_POLL_SECONDS while anyone watches (one repository
    scan for all of them) and wakes the watchers only when a state changed; a watcher costs nothing in between.
    """

    def __init__(self, health: HealthService) -> None:
        self.health = health
        self.watched: dict[str, int] = {}  # service -> watchers
        self.per_peer: dict[str, int] = {}
        self.states: dict[str, int] = {}
        self.changed = asyncio.Event()
        self.poller: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        return sum(self.watched.values())

    async def watch(self, service: str, peer: str, context: grpc.aio.ServicerContext) -> AsyncIterator[int]:
        """The service's status now, then each change, until the client goes (or the server stops)."""
        settings = self.health.settings
        if self.count >= settings.max_health_watchers:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many health watchers: at most {settings.max_health_watchers} at once "
                "(INFERA_GRPC_MAX_HEALTH_WATCHERS)",
            )
        if self.per_peer.get(peer, 0) >= settings.max_health_watchers_per_peer:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many health watchers from this address: at most {settings.max_health_watchers_per_peer} "
                "at once (INFERA_GRPC_MAX_HEALTH_WATCHERS_PER_PEER)",
            )
        self.watched[service] = self.watched.get(service, 0) + 1
        self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
        if self.poller is None:
            self.poller = asyncio.ensure_future(self._poll())
        try:
            last = None
            while True:
                status = self.states.get(service)
                if status is None:
                    status = self._status(service, None)
                    self.states[service] = status
                if status != last:
                    last = status
                    yield status
                changed = self.changed
                await changed.wait()
        finally:
            _count_out(self.watched, service)
            _count_out(self.per_peer, peer)
            if not self.watched:
                self.stop()

    def stop(self) -> None:
        poller, self.poller = self.poller, None
        if poller is not None:
            poller.cancel()
        self.states.clear()

    def _status(self, service: str, known: set[str] | None) -> int:
        status = self.health.status(service, known)
        return health_pb2.HealthCheckResponse.SERVICE_UNKNOWN if status is None else status

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_POLL_SECONDS)
            known = self.health.model_names() if any(s not in ("", messages.SERVICE) for s in self.watched) else None
            states = {service: self._status(service, known) for service in self.watched}
            if states != self.states:
                self.states = states
                changed, self.changed = self.changed, asyncio.Event()
                changed.set()


def _count_out(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
