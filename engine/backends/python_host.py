"""The server's side of a python model's host: BLS calls, custom metrics and log lines, on behalf of one instance.

An in-process model reaches it directly (it is a pb_utils.ModelHost); a stub process reaches it through the
messages engine.backends.python_process relays, using the plain-data methods.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
from collections.abc import Callable

from engine.backends import python_utils as pb_utils
from engine.backends.python_model import bls_responses, model_call
from engine.errors import InferaError
from engine.monitoring.custom_metrics import CustomMetrics
from engine.serving.model_services import INVALID_ARG, UNAVAILABLE
from engine.types import ModelCall, ModelCallResult

model_log = logging.getLogger("infera.model")
NO_BLS_IN_TRIAL = "BLS requests are not available while a model version is trial-loaded"
SELF_CALL = (
    "model '{model}' may not call itself through BLS: the call would wait for one of its own instances, which may "
    "all be waiting on such calls (call another model, or do the work in this one)"
)
Deliver = Callable[[ModelCallResult, bool], None]  # one response of a streamed BLS call, and whether it is the last


class EngineModelHost:
    """One instance's way out to the engine; `services` is None in a trial load (no BLS, private metrics)."""

    def __init__(self, model_name: str, instance_name: str, services: object | None) -> None:
        self.model_name = model_name
        self.owner = f"{model_name}/{instance_name}"
        self.services = services
        self.metrics: CustomMetrics = services.metrics if services is not None else CustomMetrics()
        # a decoupled model's responses go to the backend, which knows the streams (set by engine.backends.python)
        self.on_response: Callable[[int, ModelCallResult | None, bool], None] | None = None

    # ---- plain data (what a stub's messages carry)

    def call(self, call: ModelCall) -> concurrent.futures.Future:
        """The future results of a BLS call from model code."""
        refused = self._refusal(call)
        if refused is not None:
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result([refused])
            return future
        return self.services.call_from_thread(call)

    def open_stream(self, call: ModelCall, deliver: Deliver) -> Callable[[], None]:
        """Start a BLS call whose responses each go to `deliver(result, last)` (on the engine's loop); returns
        what cancels it."""
        refused = self._refusal(call)
        if refused is not None:
            deliver(refused, True)
            return lambda: None
        return self.services.stream_from_thread(call, deliver)

    def _refusal(self, call: ModelCall) -> ModelCallResult | None:
        """The answer to a call that may not run: none in a trial load, none into the calling model itself (its
        instances hung for good waiting on themselves)."""
        if self.services is None:
            return ModelCallResult(error=NO_BLS_IN_TRIAL, code=UNAVAILABLE)
        if call.model_name == self.model_name:
            return ModelCallResult(error=SELF_CALL.format(model=self.model_name), code=INVALID_ARG)
        return None

    def declare(self, name: str, description: str, kind: str) -> None:
        self.metrics.declare(self.owner, name, description, kind)

    def update(self, name: str, labels: dict[str, str], action: str, value: float, buckets: list[float] | None) -> None:
        self.metrics.update(name, labels, action, value, buckets)

    def value(self, name: str, labels: dict[str, str]) -> float:
        return self.metrics.value(name, labels)

    def release(self, name: str | None = None) -> None:
        self.metrics.release(self.owner, name)

    def log(self, level: int, message: str) -> None:
        model_log.log(level, "[%s] %s", self.model_name, message)

    def respond(self, stream: int, response: ModelCallResult | None, final: bool) -> None:
        """One response of a decoupled model's request (None: a flags-only final)."""
        if self.on_response is not None:
            self.on_response(stream, response, final)

    # ---- pb_utils.ModelHost (in-process models)

    def infer(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        return bls_responses(self.call(model_call(request)).result())[0]

    async def async_infer(self, request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        return bls_responses(await asyncio.wrap_future(self.call(model_call(request))))[0]

    def stream(self, request: pb_utils.InferenceRequest) -> pb_utils.ResponseIterator:
        # the model's thread waits on the queue; the engine's loop fills it
        arrived: queue.SimpleQueue[tuple[ModelCallResult, bool]] = queue.SimpleQueue()
        cancel = self.open_stream(model_call(request), lambda result, last: arrived.put((result, last)))

        def receive() -> tuple[pb_utils.InferenceResponse, bool]:
            result, last = arrived.get()
            return bls_responses([result])[0], last

        return pb_utils.ResponseIterator(receive, cancel)

    def metric_family(self, family: pb_utils.MetricFamily) -> None:
        self._model_side(self.declare, family.name, family.description, pb_utils.MetricFamily.KINDS[family.kind])

    def metric_update(self, metric: pb_utils.Metric, action: str, value: float) -> None:
        self._model_side(self.update, metric.family.name, metric.labels, action, value, metric.buckets)

    def metric_value(self, metric: pb_utils.Metric) -> float:
        return self._model_side(self.value, metric.family.name, metric.labels)

    def metric_release(self, family: pb_utils.MetricFamily) -> None:
        self.release(family.name)

    @staticmethod
    def _model_side(fn, *args):
        try:
            return fn(*args)
        except InferaError as exc:
            raise pb_utils.TritonModelException(exc.message) from None
