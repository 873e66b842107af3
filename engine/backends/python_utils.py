"""`triton_python_backend_utils` for a user's model.py: Triton's python-backend API, backed by numpy arrays.

The python backend registers this module in sys.modules under that name, so `import triton_python_backend_utils
as pb_utils` in a Triton model.py finds it. It runs in two places: inside a model's stub process (the default,
engine.backends.python_stub) and inside the server for models that opt in to in-process execution. What reaches
outside the model (BLS requests, custom metrics, log lines) goes through the `ModelHost` of the calling model,
which the runner sets around every call into model code.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from engine.datatypes import config_to_wire, numpy_dtype, wire_type_of

MODULE_NAME = "triton_python_backend_utils"

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

# Triton's words (python_backend src/pb_tensor.cc, PbTensor::AsNumpy)
BF16_AS_NUMPY = "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."


class ModelHost(Protocol):
    """What model code reaches outside itself through: the server (BLS), its metrics and its log."""

    def infer(self, request: InferenceRequest) -> InferenceResponse: ...

    async def async_infer(self, request: InferenceRequest) -> InferenceResponse: ...

    def stream(self, request: InferenceRequest) -> ResponseIterator:
        """A BLS call whose responses are read as they come (exec(decoupled=True))."""
        ...

    def metric_family(self, family: MetricFamily) -> None: ...

    def metric_update(self, metric: Metric, action: str, value: float) -> None: ...

    def metric_value(self, metric: Metric) -> float: ...

    def metric_release(self, family: MetricFamily) -> None: ...

    def log(self, level: int, message: str) -> None: ...

    def respond(self, stream: int, response: Any, final: bool) -> None:
        """One response of a decoupled model's request (`stream` names it); `response` is plain data or None."""
        ...


_current_host: contextvars.ContextVar[ModelHost | None] = contextvars.ContextVar("infera_model_host", default=None)
_process_host: list[ModelHost] = []  # the stub's one host: threads the model starts itself see it too


def set_host(host: ModelHost | None) -> contextvars.Token:
    """Make `host` the one model code reaches in this context (the runner calls this around model code)."""
    return _current_host.set(host)


def reset_host(token: contextvars.Token) -> None:
    _current_host.reset(token)


def set_process_host(host: ModelHost) -> None:
    """In a stub process: the host every thread of the model reaches."""
    _process_host[:] = [host]


def current_host() -> ModelHost:
    host = _current_host.get() or (_process_host[0] if _process_host else None)
    if host is None:
        raise TritonModelException("this call needs a running model: it is only available inside model.py calls")
    return host


class TritonError:
    """An error a model puts in a response; `code` uses Triton's names."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r})"


class TritonModelException(Exception):
    """What Triton raises into model code for failures the model may catch."""

    def message(self) -> str:
        return str(self)


class Tensor:
    """A named tensor holding one numpy array (BF16 as ml_dtypes.bfloat16, BYTES as an object array)."""

    def __init__(self, name: str, data: np.ndarray) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(f"tensor '{name}' must hold a numpy array, got {type(data).__name__}")
        self._name = name
        self._data = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The tensor's numpy array; BF16 has none in numpy, so it raises as Triton's does (use to_dlpack())."""
        if wire_type_of(self._data) == "BF16":
            raise TritonModelException(BF16_AS_NUMPY)
        return self._data

    def _array(self) -> np.ndarray:
        """The array the server carries, BF16 (ml_dtypes.bfloat16) included: not part of Triton's API."""
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def triton_dtype(self) -> str:
        return wire_type_of(self._data)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of this tensor (torch.from_dlpack and friends take it without a copy)."""
        data = self._data
        if data.dtype.kind == "O":
            raise TritonModelException(f"tensor '{self._name}' holds BYTES, which DLPack cannot carry")
        if not data.flags.writeable or not data.flags.c_contiguous:
            data = np.ascontiguousarray(data).copy()  # DLPack cannot say read-only; the capsule gets its own copy
        if wire_type_of(data) == "BF16":
            torch = _torch(f"tensor '{self._name}' is BF16: to_dlpack() needs torch, which carries bfloat16")
            return torch.utils.dlpack.to_dlpack(torch.from_numpy(data.view(np.int16)).view(torch.bfloat16))
        return data.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with `__dlpack__` (a torch tensor, a numpy array)."""
        if isinstance(capsule, np.ndarray):
            return Tensor(name, capsule)
        torch = _optional_torch()
        if torch is not None and (type(capsule).__name__ == "PyCapsule" or isinstance(capsule, torch.Tensor)):
            value = capsule if isinstance(capsule, torch.Tensor) else torch.utils.dlpack.from_dlpack(capsule)
            return Tensor(name, _torch_to_numpy(torch, value))
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (BufferError, TypeError, RuntimeError) as exc:
            raise TritonModelException(f"tensor '{name}' cannot be made from DLPack: {exc}") from None

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._data.shape)}, dtype={self._data.dtype})"


class _Capsule:
    """A bare DLPack capsule, as numpy.from_dlpack wants it (an object with __dlpack__ on the CPU)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _optional_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch(why: str) -> Any:
    torch = _optional_torch()
    if torch is None:
        raise TritonModelException(why)
    return torch


def _torch_to_numpy(torch: Any, value: Any) -> np.ndarray:
    value = value.detach().cpu().contiguous()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).numpy().view(numpy_dtype("BF16"))
    return value.numpy()


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


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The `input` entry called `name` of a model config dict (json.loads(args["model_config"]))."""
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The `output` entry called `name` of a model config dict."""
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def triton_string_to_numpy(triton_type_string: str) -> type:
    """TYPE_FP32 -> numpy.float32; TYPE_STRING -> numpy.object_."""
    try:
        return numpy_dtype(config_to_wire(triton_type_string)).type
    except ValueError:
        raise TritonModelException(f"unknown Triton type '{triton_type_string}'") from None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config asks for a decoupled model."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class ModelConfig:
    """The config `auto_complete_config` receives: read it, fill what the model knows, return it."""

    def __init__(self, model_config: dict[str, Any] | str) -> None:
        self._config = json.loads(model_config) if isinstance(model_config, str) else dict(model_config)

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def max_batch_size(self) -> int:
        return int(self._config.get("max_batch_size", 0))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = self.max_batch_size()
        if current and current != max_batch_size:
            raise TritonModelException(
                f"configuration specified max_batch_size {current}, but auto-complete-config function for model "
                f"'{self._config.get('name', '')}' tries to set it to {max_batch_size}"
            )
        self._config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        self._config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy)

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's parameter name
        self._add_tensor("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output)

    def _add_tensor(self, role: str, tensor: dict[str, Any]) -> None:
        if not isinstance(tensor, dict) or not {"name", "data_type", "dims"} <= tensor.keys():
            raise TritonModelException(f"{role} {tensor!r} must be a dict with 'name', 'data_type' and 'dims'")
        existing = next((t for t in self._config.setdefault(role, []) if t.get("name") == tensor["name"]), None)
        if existing is None:
            self._config[role].append(dict(tensor))
            return
        for key in ("data_type", "dims"):
            if key in existing and _normal(existing[key]) != _normal(tensor[key]):
                raise TritonModelException(
                    f"{role} '{tensor['name']}' has {key} {existing[key]} in the configuration, auto-complete "
                    f"gives {tensor[key]}"
                )
        existing.update({key: value for key, value in tensor.items() if key not in existing})


def _normal(value: Any) -> Any:
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else value


# ---- custom metrics (Triton's pb_utils.MetricFamily / Metric)


class MetricFamily:
    """A family of custom metrics the model exports on /metrics: COUNTER, GAUGE or HISTOGRAM."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    KINDS = {COUNTER: "counter", GAUGE: "gauge", HISTOGRAM: "histogram"}

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in self.KINDS:
            raise TritonModelException(f"metric family '{name}': kind must be COUNTER, GAUGE or HISTOGRAM")
        if not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_"):
            raise TritonModelException(f"metric family name {name!r} must start with a letter or '_'")
        if not all(ch.isalnum() or ch in "_:" for ch in name):
            raise TritonModelException(f"metric family name {name!r} may hold only letters, digits, '_' and ':'")
        self.name = name
        self.description = description
        self.kind = kind
        self._host = current_host()
        self._host.metric_family(self)

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:  # noqa: N802
        return Metric(self, labels or {}, buckets)

    def __del__(self) -> None:
        host = getattr(self, "_host", None)
        if host is not None:
            with contextlib.suppress(Exception):  # the host may be gone at interpreter exit
                host.metric_release(self)


class Metric:
    """One labelled metric of a family: increment (counter, gauge), set (gauge), observe (histogram), value."""

    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None = None) -> None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise TritonModelException(f"metric labels of '{family.name}' must map strings to strings")
        if family.kind == MetricFamily.HISTOGRAM:
            if not buckets or list(buckets) != sorted(buckets):
                raise TritonModelException(f"histogram '{family.name}' needs buckets in increasing order")
        elif buckets is not None:
            raise TritonModelException(f"metric '{family.name}' is not a histogram; it takes no buckets")
        self.family = family
        self.labels = dict(labels)
        self.buckets = [float(b) for b in buckets] if buckets else None
        family._host.metric_update(self, "create", 0.0)

    def increment(self, value: float) -> None:
        if self.family.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException(f"histogram '{self.family.name}' takes observe(), not increment()")
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(f"counter '{self.family.name}' cannot be incremented by a negative value")
        self.family._host.metric_update(self, "increment", float(value))

    def set(self, value: float) -> None:
        if self.family.kind != MetricFamily.GAUGE:
            raise TritonModelException(f"only a gauge can be set; '{self.family.name}' is not one")
        self.family._host.metric_update(self, "set", float(value))

    def observe(self, value: float) -> None:
        if self.family.kind != MetricFamily.HISTOGRAM:
            raise TritonModelException(f"only a histogram observes; '{self.family.name}' is not one")
        self.family._host.metric_update(self, "observe", float(value))

    def value(self) -> float:
        """The current value (a histogram's sum)."""
        return self.family._host.metric_value(self)


# ---- logging (pb_utils.Logger)


class LogLevel:
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Log lines from model code, written to the server's log with the model's name."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        current_host().log(level, str(message))

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, LogLevel.VERBOSE)


def run_coroutine(coroutine: Any) -> Any:
    """Run `async def execute` to its end on an event loop of this thread (kept for the model's later calls)."""
    loop = _thread_loop()
    return loop.run_until_complete(coroutine)


_loops = threading.local()


def _thread_loop() -> asyncio.AbstractEventLoop:
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    return loop
