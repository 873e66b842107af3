"""Plain data that flows through the engine: one inference request and its response."""

from __future__ import annotations

from collections.abc import Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# who the running task serves: a front end's caller key (engine.frontend.caller_limits.caller_key), set when it
# counts the request in; read where something is bounded per caller (a caller's open sequences). None: the engine
# itself (warm-up, a model's own calls)
current_caller: ContextVar[Hashable | None] = ContextVar("infera_current_caller", default=None)


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (binary_data, classification)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InferenceRequest:
    """One client request, already decoded into numpy arrays and validated against the model config.

    BYTES tensors are numpy object arrays of `bytes`. `batch_size` is the first dimension when the model
    batches (max_batch_size > 0), else 1.
    """

    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: int | None = None
    id: str = ""
    requested_outputs: list[RequestedOutput] | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    sequence_id: int | str = 0
    sequence_start: bool = False
    sequence_end: bool = False
    batch_size: int = 1
    arrival_ns: int = 0  # time.monotonic_ns() when it reached its model's queue
    protocol: str = "http"  # the front end it came through, for the statistics by protocol
    trace: Any = None  # an engine.monitoring.tracing.Trace when this request is traced
    stream: Any = None  # an engine.serving.streams.ResponseStream when the model is decoupled
    caller: Hashable | None = None  # who sent it (current_caller when it reached its version); None: the engine


@dataclass(slots=True, eq=False)
class BatchOutputs:
    """A batch's outputs before they were sliced per request (batch dimension first, rows in request order), so
    that a codec can encode them once for every request of the batch."""

    arrays: dict[str, np.ndarray]
    encoded: dict[Any, Any] = field(default_factory=dict)  # a codec's work on the whole batch, by its own keys


@dataclass(slots=True)
class InferenceResponse:
    """The outputs of one request, in the order the model config lists them.

    `rows` says where they come from when they are a batch's rows `start:stop` of `BatchOutputs` (untouched since).
    """

    model_name: str
    model_version: int
    outputs: dict[str, np.ndarray]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    rows: tuple[BatchOutputs, int, int] | None = None


@dataclass(slots=True)
class ModelCall:
    """A request that model code sends to a model of this server (Triton's BLS), as plain data."""

    model_name: str
    inputs: dict[str, np.ndarray]
    model_version: int = -1
    requested_outputs: list[str] = field(default_factory=list)
    parameters: dict[str, Any] = field(default_factory=dict)
    request_id: str = ""
    correlation_id: int | str = 0
    flags: int = 0
    timeout_us: int = 0


@dataclass(slots=True)
class ModelCallResult:
    """One response to a ModelCall: its outputs, or the error (message and Triton error code) it failed with."""

    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    error: str = ""
    code: int = 0
