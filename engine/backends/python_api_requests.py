"""Requests and responses as model code sees them: `InferenceRequest` (with BLS `exec`/`async_exec`), the
`ResponseIterator` of a decoupled BLS call, a decoupled model's `InferenceResponseSender`, `InferenceResponse`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from engine.backends.python_api_errors import TritonError, TritonModelException
from engine.backends.python_api_host import current_host
from engine.backends.python_api_tensors import Tensor

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class InferenceRequest:
    """One request as model code sees it, and the request model code sends to another model (BLS).

    Keyword arguments as Triton's: `InferenceRequest(model_name=..., inputs=[...], requested_output_names=[...])`.
    """

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._request_id = _text("request_id", request_id)
        self._correlation_id = correlation_id
        self._inputs = list(inputs or [])
        self._requested_output_names = [_text("requested_output_names", n) for n in requested_output_names or []]
        self._model_name = _text("model_name", model_name)
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._preferred_memory = preferred_memory
        self._parameters = _parameters_json(parameters)
        self._cancelled: threading.Event | None = None  # set by the server when the client goes away
        self._response_sender: InferenceResponseSender | None = None

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def parameters(self) -> str:
        """The request's parameters as a JSON string, as Triton gives them."""
        return self._parameters

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        """Microseconds a BLS request may wait in the target's queue (0: the target's own policy)."""
        return self._timeout

    def is_cancelled(self) -> bool:
        """Whether the client gave up on this request (it disconnected): a decoupled model may stop sending."""
        return self._cancelled is not None and self._cancelled.is_set()

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:
            raise TritonModelException(
                "this request has no response sender: only decoupled models (model_transaction_policy "
                "{ decoupled: true }) send responses through one"
            )
        return self._response_sender

    def exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """Run this request on the model it names and wait (BLS); errors come back in the response. With
        `decoupled`, the responses as they come (a decoupled model's any number; any other model's one)."""
        self._check_target()
        if decoupled:
            return current_host().stream(self)
        return current_host().infer(self)

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """`exec` for `async def execute`: other requests run while this one waits. With `decoupled`, as in
        Triton, the ResponseIterator is iterated with a plain `for` (each step waits for the next response)."""
        self._check_target()
        if decoupled:
            return current_host().stream(self)
        return await current_host().async_infer(self)

    def _check_target(self) -> None:
        if not self._model_name:
            raise TritonModelException("a BLS request needs model_name")


def _text(argument: str, value: str | bytes) -> str:
    """A string argument as Triton's binding takes it: str, or bytes in UTF-8 (pybind11 converts both)."""
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise TritonModelException(f"{argument} {bytes(value)[:60]!r} is not UTF-8 text") from None
    return value


class ResponseIterator:
    """The responses of `exec(decoupled=True)`, each as it arrives, up to and including the last (which may be an
    empty one: the final flag alone); iterating again starts over. `cancel()` cancels the call: the model it went
    to sees request.is_cancelled().

    `receive()` blocks until the next response and says whether it is the last; `cancel` and `forget` (the
    iterator was dropped before the end: later responses are not kept) come from the host."""

    def __init__(
        self,
        receive: Callable[[], tuple[InferenceResponse, bool]],
        cancel: Callable[[], None],
        forget: Callable[[], None] | None = None,
    ) -> None:
        self._receive = receive
        self._cancel = cancel
        self._forget = forget
        self._responses: list[InferenceResponse] = []
        self._index = 0
        self._finished = False

    def __iter__(self) -> ResponseIterator:
        if self._finished and self._index >= len(self._responses):
            self._index = 0
        return self

    def __next__(self) -> InferenceResponse:
        if self._index < len(self._responses):
            self._index += 1
            return self._responses[self._index - 1]
        if self._finished:
            raise StopIteration
        response, self._finished = self._receive()
        self._responses.append(response)
        self._index += 1
        return response

    def cancel(self) -> None:
        if not self._finished:
            self._cancel()

    def __del__(self) -> None:
        if not self._finished and self._forget is not None:
            self._forget()


class InferenceResponseSender:
    """Sends the responses of one request of a decoupled model, from any thread, until the final flag.

    `deliver(response, final)` hands each one to the server; `requested` prunes outputs to those the client asked
    for, as Triton does.
    """

    def __init__(
        self,
        deliver: Callable[[InferenceResponse | None, bool], None],
        cancelled: threading.Event,
        requested: list[str] | None = None,
    ) -> None:
        self._deliver = deliver
        self._cancelled = cancelled
        self._requested = set(requested or [])
        self._closed = False
        self._lock = threading.Lock()

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """One response (flags 0), or the last (TRITONSERVER_RESPONSE_COMPLETE_FINAL), with or without outputs."""
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if flags == 0 and response is None:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"Unable to send response. Expected a pb_utils.InferenceResponse, got {type(response).__name__}."
            )
        with self._lock:
            if self._closed:
                raise TritonModelException("Unable to send response. Response sender has been closed.")
            self._closed = flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if response is not None and self._requested and not response.has_error():
            kept = [t for t in response.output_tensors() if t.name() in self._requested]
            response = InferenceResponse(kept, parameters=response.parameters())
        self._deliver(response, self._closed)

    def is_cancelled(self) -> bool:
        return self._cancelled.is_set()

    def is_closed(self) -> bool:
        with self._lock:
            return self._closed


class InferenceResponse:
    """The outputs for one request, or the error it failed with."""

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._output_tensors = list(output_tensors or [])
        self._error = error
        self._parameters = _parameters_json(parameters)

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


def _parameters_json(parameters: dict[str, Any] | str | None) -> str:
    if isinstance(parameters, str):
        return parameters
    if parameters is not None and not isinstance(parameters, dict):
        raise TritonModelException(f"parameters must be a dict or a JSON string, got {type(parameters).__name__}")
    for key, value in (parameters or {}).items():
        if not isinstance(key, str) or not isinstance(value, (bool, int, str)):
            raise TritonModelException(f"parameter '{key}' must map a string to a bool, an int or a string")
    return json.dumps(parameters or {})


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input tensor called `name`, or None."""
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output tensor called `name`, or None."""
    return next((t for t in response.output_tensors() if t.name() == name), None)
