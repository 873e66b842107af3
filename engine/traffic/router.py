"""The traffic router: in front of the model manager, it chooses the one version each request runs on, once.

A request that names a version gets it; one that continues a sequence stays on the version running it (a retired
one still draining included); any other follows the model's traffic policy (engine.traffic.policies): the active
version, a canary's drawn version, or the active version with a shadow copy for the candidate. A front end asks
`route` before it decodes the request (a `RequestKey` from the request's parameters), decodes against the routed
version's config, and runs it with `infer` or `infer_stream` on that `VersionRoute`: nothing looks the version up
again. The policies in force, the shadow copies under way and the rollback guard's verdicts live here too.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from engine.errors import DecoupledOnly, InferaError, InvalidArgument, ModelNotFound
from engine.serving.lifecycle import ModelManager, ServedVersion
from engine.serving.model_status import ModelState
from engine.serving.streams import ResponseStream, StreamTimes
from engine.traffic.policies import TrafficPolicy, TrafficState, check_policy
from engine.types import InferenceRequest, InferenceResponse

log = logging.getLogger("infera.engine")

RollbackListener = Callable[[str, TrafficPolicy, str], None]


class Routable(Protocol):
    """What a request's version is chosen by (an InferenceRequest, or a RequestKey before it is decoded)."""

    model_name: str
    model_version: int | None
    parameters: Mapping[str, Any]
    sequence_id: int | str
    sequence_start: bool


@dataclass(slots=True)
class RequestKey:
    """A request's routing fields, read from its parameters before it is decoded."""

    model_name: str
    model_version: int | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    sequence_id: int | str = 0
    sequence_start: bool = False

    @classmethod
    def of(cls, model: str, version: int | None, parameters: Any = None) -> RequestKey:
        """The key of a request with these (not yet checked) parameters: a sequence field of the wrong type counts
        as absent here, and the decoder then refuses the request."""
        if not isinstance(parameters, dict) or not parameters:
            return cls(model, version)
        sequence_id = parameters.get("sequence_id", 0)
        if not (isinstance(sequence_id, str) or (type(sequence_id) is int and sequence_id >= 0)):
            sequence_id = 0
        return cls(model, version, parameters, sequence_id, parameters.get("sequence_start") is True)


@dataclass(slots=True)  # not frozen: a frozen one costs a microsecond a request to build
class VersionRoute:
    """The version a request runs on and what the policy in force does with it."""

    served: ServedVersion
    state: TrafficState | None = None  # the policy that routed it; None when none did
    candidate: bool = False  # a canary's candidate: its outcome goes to the rollback guard
    shadow: int | None = None  # the shadow candidate a copy runs on once the request is answered


class TrafficRouter:
    """Chooses each request's version once, runs it there, and keeps the models' traffic policies."""

    def __init__(self, manager: ModelManager) -> None:
        self.manager = manager
        self.policies: dict[str, TrafficState] = {}  # models under a canary or shadow policy
        self.shadow_tasks: set[asyncio.Task] = set()
        # called as (model, the policy that was rolled back, why) when a guard rolls a policy back
        self.on_rollback: RollbackListener | None = None

    # ---- choosing

    def route(self, request: Routable) -> VersionRoute:
        """The version `request` runs on (ModelNotFound or Unavailable when none can take it)."""
        state = self.policies.get(request.model_name)
        if state is None or not _routed(state, request):  # no call on the hot path without a policy
            return VersionRoute(self.manager.route(request))  # type: ignore[arg-type]  # reads the Routable fields
        active = self.manager.get(request.model_name)
        if state.policy.mode == "canary":
            candidate = self._canary_candidate(state, request, active.version)
            if candidate is not None:
                return VersionRoute(candidate, state, candidate=True)
            return VersionRoute(active, state)
        return VersionRoute(active, state, shadow=state.router.shadow_target())

    def _canary_candidate(self, state: TrafficState, request: Routable, active: int) -> ServedVersion | None:
        """The version a canary sends a request that names no version to, when it is not the active one."""
        version = state.router.choose(request.parameters, active)
        if version == active:
            return None
        entry = self.manager.models.get(request.model_name)
        served = entry.versions.get(version) if entry is not None else None
        return served if served is not None and served.state is ModelState.READY else None

    # ---- running

    def infer(self, route: VersionRoute, request: InferenceRequest) -> Awaitable[InferenceResponse]:
        """The response of `request` on its route. Without a policy this hands back the version's own coroutine
        (one coroutine frame less a request); a decoupled version raises at once (it answers streams only)."""
        served = route.served
        if served.config.decoupled and request.stream is None:
            raise _decoupled_only(request.model_name)
        if route.state is None:
            return served.infer(request)
        if route.candidate:
            return self._on_candidate(route.state, request, served)
        return self._on_active(route, request)

    async def infer_stream(self, route: VersionRoute, request: InferenceRequest) -> ResponseStream:
        """Run a request whose responses are read as a stream: a decoupled model's (any number, sent as the model
        makes them), or any other model's (exactly one)."""
        served = route.served
        if not served.config.decoupled:
            response = await self.infer(route, request)
            stream = ResponseStream(started_ns=request.arrival_ns or None)
            stream.model_version = response.model_version
            stream.send(response.outputs, final=True)
            return stream
        stream = request.stream = ResponseStream(started_ns=request.arrival_ns or None)
        stream.model_version = served.version
        if route.state is None or not route.candidate:
            await served.infer(request)
            return stream
        state = route.state
        try:
            await served.infer(request)
        except InferaError:
            self._guard(state, request.model_name, failed=True, seconds=0.0)
            raise
        stream.when_final(lambda times: self._guard_stream(state, request.model_name, times))
        return stream

    async def _on_active(self, route: VersionRoute, request: InferenceRequest) -> InferenceResponse:
        """A request a policy left on the active version; under a shadow, a copy then runs on the candidate."""
        response = await route.served.infer(request)
        if route.shadow is not None and route.state is not None:
            task = asyncio.get_running_loop().create_task(self._shadow(route.state, request, response, route.shadow))
            self.shadow_tasks.add(task)
            task.add_done_callback(self.shadow_tasks.discard)
        return response

    async def _on_candidate(self, state: TrafficState, request: InferenceRequest, served: ServedVersion):
        """A canary request on the candidate: timed, so the guard can roll the policy back."""
        started = time.monotonic()
        try:
            response = await served.infer(request)
        except InferaError:
            self._guard(state, request.model_name, failed=True, seconds=time.monotonic() - started)
            raise
        self._guard(state, request.model_name, failed=False, seconds=time.monotonic() - started)
        return response

    async def _shadow(
        self, state: TrafficState, request: InferenceRequest, answered: InferenceResponse, target: int
    ) -> None:
        """Run a copy of an answered request on the shadow candidate and compare; its answer goes nowhere."""
        try:
            candidate = self.manager.get(request.model_name, target)
        except InferaError:
            return
        if candidate.state is not ModelState.READY:
            return
        copy = InferenceRequest(
            model_name=request.model_name,
            inputs=request.inputs,
            model_version=target,
            parameters=dict(request.parameters),
            batch_size=request.batch_size,
            protocol="shadow",
        )
        started = time.monotonic()
        try:
            response = await candidate.infer(copy)
        except InferaError:
            state.comparison.failed()
            self._guard(state, request.model_name, failed=True, seconds=time.monotonic() - started)
            return
        self._guard(state, request.model_name, failed=False, seconds=time.monotonic() - started)
        state.comparison.compare(request.inputs, answered.outputs, response.outputs)

    def _guard_stream(self, state: TrafficState, model: str, times: StreamTimes) -> None:
        """A canary's stream has ended: failed when its last response was an error (not a client that left), its
        latency the time to its first response (a stream's length is the client's, not the version's)."""
        first = times.first_response_ns
        seconds = (first if first is not None else times.ended_ns - times.started_ns) / 1e9
        self._guard(state, model, failed=times.failed and not times.cancelled, seconds=seconds)

    def _guard(self, state: TrafficState, model: str, *, failed: bool, seconds: float) -> None:
        reason = state.guard.record(failed, seconds) if state.guard is not None else None
        if reason is None or self.policies.get(model) is not state:
            return
        log.warning("model '%s': traffic policy rolled back to the active version: %s", model, reason)
        rolled = TrafficState.of(TrafficPolicy())
        rolled.rolled_back = reason
        rolled.comparison = state.comparison
        self.policies[model] = rolled
        if self.on_rollback is not None:
            self.on_rollback(model, state.policy, reason)

    async def wait_for_shadows(self) -> None:
        """Until every shadow copy under way has finished."""
        if self.shadow_tasks:
            await asyncio.wait(list(self.shadow_tasks))

    # ---- policies

    def set_policy(self, name: str, policy: TrafficPolicy) -> None:
        """Put a policy in force for `name`: InvalidArgument when its versions are not READY, IncompatibleVersion
        when one of them takes other inputs or gives other outputs than the active version."""
        status = self.manager.status(name)
        if not status.versions:
            raise ModelNotFound(f"Request for unknown model: '{name}' is not found")
        entry = self.manager.models[name]
        configs = {version: served.config for version, served in entry.versions.items()}
        active = configs.get(status.active) if status.active is not None else None
        decoupled = active.decoupled if active is not None else False
        check_policy(name, policy, set(status.ready), status.active, decoupled=decoupled, configs=configs)
        if policy.mode == "active":
            self.policies.pop(name, None)
        else:
            self.policies[name] = TrafficState.of(policy)

    def forget(self, name: str) -> None:
        """The model is unloaded: no policy of its stays in force."""
        self.policies.pop(name, None)

    def status(self, name: str) -> dict:
        """The policy in force for `name`, the shadow comparison, and the last automatic rollback."""
        state = self.policies.get(name)
        return state.to_dict() if state is not None else TrafficState.of(TrafficPolicy()).to_dict()

    def keeps(self, name: str, versions: set[int]) -> None:
        """Refuse to retire a version that the model's traffic policy still sends requests to."""
        state = self.policies.get(name)
        if state is None:
            return
        gone = sorted(state.policy.versions() - versions)
        if gone:
            raise InvalidArgument(
                f"version {gone[0]} of model '{name}' is in its {state.policy.mode} traffic policy; "
                "change the policy before unloading it"
            )


def _decoupled_only(model: str) -> DecoupledOnly:
    return DecoupledOnly(
        f"model '{model}' is decoupled (it sends any number of responses per request): call it through "
        f"POST /v2/models/{model}/generate_stream or gRPC ModelStreamInfer"
    )


def _routed(state: TrafficState, request: Routable) -> bool:
    """Whether the model's traffic policy picks this request's version: one in force, and a request that names no
    version outside a sequence (a sequence stays on one version: the active one)."""
    return state.policy.mode != "active" and request.model_version is None and request.sequence_id in (0, "")
