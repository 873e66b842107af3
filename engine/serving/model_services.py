"""What the engine offers model code: requests into this server's models (Triton's BLS) and custom metrics.

A `ModelCall` is checked against the target's config exactly as a client's request is, then queued like one
(protocol "bls" in the statistics); its failures come back as results with Triton's error codes, never raised into
model code.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable

import numpy as np

from engine.config.datatypes import wire_type_of
from engine.config.model_config import ModelConfig
from engine.errors import (
    DecoupledOnly,
    InferaError,
    InvalidArgument,
    ModelNotFound,
    NotFound,
    Unavailable,
    Unsupported,
)
from engine.monitoring.custom_metrics import CustomMetrics
from engine.protocol.validation import check_input, check_required_inputs, common_batch_size, input_config
from engine.serving.streams import ResponseStream, StreamedResponse
from engine.types import InferenceRequest, InferenceResponse, ModelCall, ModelCallResult, RequestedOutput

# pb_utils.TritonError codes
INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED = 1, 2, 3, 4, 5
NOT_SERVING = "this server is not serving: no model can be called"


def error_code(exc: InferaError) -> int:
    """Triton's error code for an engine error."""
    if isinstance(exc, ModelNotFound | NotFound):
        return NOT_FOUND
    if isinstance(exc, InvalidArgument):
        return INVALID_ARG
    if isinstance(exc, Unavailable):
        return UNAVAILABLE
    if isinstance(exc, Unsupported):
        return UNSUPPORTED
    return INTERNAL


class ModelServices:
    """BLS and custom metrics for the models of one server; `loop` is the loop the engine serves on."""

    def __init__(
        self,
        infer: Callable[[InferenceRequest], Awaitable[InferenceResponse]],
        config_of: Callable[[str, int | None], ModelConfig],
        metrics: CustomMetrics,
        infer_stream: Callable[[InferenceRequest], Awaitable[ResponseStream]] | None = None,
    ) -> None:
        self._infer = infer
        self._infer_stream = infer_stream
        self._config_of = config_of
        self.metrics = metrics
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def infer(self) -> Callable[[InferenceRequest], Awaitable[InferenceResponse]]:
        """The server's own inference (for schedulers that call other models: ensembles)."""
        return self._infer

    @property
    def infer_stream(self) -> Callable[[InferenceRequest], Awaitable[ResponseStream]] | None:
        """The server's streamed inference (ensembles whose steps are decoupled)."""
        return self._infer_stream

    @property
    def config_of(self) -> Callable[[str, int | None], ModelConfig]:
        """The config a loaded model serves with (ModelNotFound/Unavailable when it serves none)."""
        return self._config_of

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def call(self, call: ModelCall) -> list[ModelCallResult]:
        """Run one model call on this server; a failure is a result carrying the error, never an exception."""
        try:
            request = self.request_of(call)
            response = await self._infer(request)
        except DecoupledOnly:
            return [ModelCallResult(error=_decoupled_call(call.model_name), code=UNSUPPORTED)]
        except InferaError as exc:
            return [ModelCallResult(error=exc.message, code=error_code(exc))]
        return [_requested(call, response.outputs)]

    def call_from_thread(self, call: ModelCall) -> concurrent.futures.Future:
        """`call` from a thread that is not the engine's loop (a model instance's worker, a stub reader)."""
        if self.loop is None or self.loop.is_closed():
            future: concurrent.futures.Future = concurrent.futures.Future()
            future.set_result([ModelCallResult(error=NOT_SERVING, code=UNAVAILABLE)])
            return future
        return asyncio.run_coroutine_threadsafe(self.call(call), self.loop)

    def stream_from_thread(
        self, call: ModelCall, deliver: Callable[[ModelCallResult, bool], None]
    ) -> Callable[[], None]:
        """Start `call` from any thread as a stream (exec(decoupled=True)): each response goes to
        `deliver(result, last)` on the engine's loop, and the last one always comes, an error if the call could not
        run. Returns what cancels it, callable from any thread (the called model sees request.is_cancelled())."""
        loop = self.loop
        if loop is None or loop.is_closed() or self._infer_stream is None:
            deliver(ModelCallResult(error=NOT_SERVING, code=UNAVAILABLE), True)
            return lambda: None
        opened: list[ResponseStream] = []
        cancelled = False

        async def run() -> None:
            try:
                stream = await self._infer_stream(self.request_of(call))
            except InferaError as exc:
                deliver(ModelCallResult(error=exc.message, code=error_code(exc)), True)
                return
            opened.append(stream)
            if cancelled:
                stream.cancel()
            ended = False
            try:
                async for response in stream:
                    ended = response.final
                    deliver(_stream_result(call, response), ended)
            finally:
                if not ended:  # the stream broke off (the server stopping): the caller must not wait forever
                    deliver(ModelCallResult(error="the call ended without its last response", code=INTERNAL), True)

        def cancel_on_loop() -> None:
            nonlocal cancelled
            cancelled = True
            if opened:
                opened[0].cancel()

        asyncio.run_coroutine_threadsafe(run(), loop)
        return lambda: loop.call_soon_threadsafe(cancel_on_loop)

    def request_of(self, call: ModelCall) -> InferenceRequest:
        """The engine request a call makes, checked against the target's config like a client's request."""
        version = call.model_version if call.model_version > 0 else None
        config = self._config_of(call.model_name, version)
        batches: dict[str, int] = {}
        inputs: dict[str, np.ndarray] = {}
        for name, array in call.inputs.items():
            tensor = input_config(config, name)
            try:
                datatype = wire_type_of(array)
            except ValueError as exc:
                raise InvalidArgument(f"input '{name}': {exc}") from None
            batches[name] = check_input(config, tensor, datatype, list(array.shape))
            inputs[name] = array
        check_required_inputs(config, inputs)
        for name in call.requested_outputs:
            if config.output_named(name) is None:
                raise InvalidArgument(f"unexpected inference output '{name}' for model '{call.model_name}'")
        request = InferenceRequest(
            model_name=call.model_name,
            inputs=inputs,
            model_version=version,
            id=call.request_id,
            requested_outputs=[RequestedOutput(name) for name in call.requested_outputs] or None,
            parameters=dict(call.parameters),
            timeout_us=call.timeout_us,
            batch_size=common_batch_size(config, batches),
            protocol="bls",
        )
        if call.correlation_id not in (0, ""):
            request.sequence_id = call.correlation_id
            request.sequence_start = bool(call.flags & 1)
            request.sequence_end = bool(call.flags & 2)
        return request


def _stream_result(call: ModelCall, response: StreamedResponse) -> ModelCallResult:
    """One response of a streamed call as model code reads it: its error, its requested outputs, or nothing (the
    final flag alone)."""
    if response.error is not None:
        return ModelCallResult(error=response.error.message, code=error_code(response.error))
    return _requested(call, response.outputs) if response.outputs else ModelCallResult()


def _requested(call: ModelCall, outputs: dict[str, np.ndarray]) -> ModelCallResult:
    """The outputs `call` asked for (all of them when it named none), or the error naming those the model lacks."""
    wanted = call.requested_outputs or list(outputs)
    missing = [name for name in wanted if name not in outputs]
    if missing:
        message = f"model '{call.model_name}' has no output(s) {', '.join(map(repr, missing))}"
        return ModelCallResult(error=message, code=INVALID_ARG)
    return ModelCallResult(outputs={name: outputs[name] for name in wanted})


def _decoupled_call(model: str) -> str:
    return (
        f"Model {model} is using the decoupled transaction policy: a BLS call to it needs 'decoupled=True' in "
        "exec() or async_exec(), which returns its responses one by one"
    )
