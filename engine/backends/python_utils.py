"""`triton_python_backend_utils` for a user's model.py: Triton's python-backend API, backed by numpy arrays.

The python backend registers this module in sys.modules under that name, so `import triton_python_backend_utils
as pb_utils` in a Triton model.py finds it. Everything lives in this process; tensors are numpy arrays (BYTES are
object arrays of bytes) and nothing is copied between processes as in Triton.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from engine.datatypes import config_to_wire, numpy_dtype

MODULE_NAME = "triton_python_backend_utils"


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
    """A named tensor holding one numpy array."""

    def __init__(self, name: str, data: np.ndarray) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(f"tensor '{name}' must hold a numpy array, got {type(data).__name__}")
        self._name = name
        self._data = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._data.shape)}, dtype={self._data.dtype})"


class InferenceRequest:
    """One request as model code sees it: its input tensors, the outputs wanted, its parameters."""

    def __init__(
        self,
        inputs: list[Tensor],
        requested_output_names: list[str] | None = None,
        request_id: str = "",
        parameters: dict[str, Any] | str | None = None,
        model_name: str = "",
        model_version: int = -1,
    ) -> None:
        self._inputs = list(inputs)
        self._requested_output_names = list(requested_output_names or [])
        self._request_id = request_id
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})
        self._model_name = model_name
        self._model_version = model_version

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def request_id(self) -> str:
        return self._request_id

    def parameters(self) -> str:
        """The request's parameters as a JSON string, as Triton gives them."""
        return self._parameters

    def correlation_id(self) -> int:
        return 0

    def flags(self) -> int:
        return 0

    def is_cancelled(self) -> bool:
        return False

    def exec(self, *args: Any, **kwargs: Any) -> Any:
        raise TritonModelException("Infera does not run BLS requests (InferenceRequest.exec) from model.py")

    async def async_exec(self, *args: Any, **kwargs: Any) -> Any:
        return self.exec()

    def get_response_sender(self) -> Any:
        raise TritonModelException("Infera does not serve decoupled python models (no response sender)")


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
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return self._parameters


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
    """Whether the config asks for a decoupled model (Infera serves only non-decoupled ones)."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
