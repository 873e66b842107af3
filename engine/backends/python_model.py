"""One user's model.py, loaded and driven: auto-complete, initialize, execute (plain or `async def`), finalize.

Shared by the two places a python model runs: its stub process (engine.backends.python_stub) and, for models that
opt in, the server process. Requests come in and responses go out as plain arrays (`RequestData`,
`ResponseData`); everything model code reaches outside itself goes through the `ModelHost` set around each call.
Kept free of the engine's serving side so a stub imports only this, pb_utils and numpy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from engine.backends import python_utils as pb_utils
from engine.types import ModelCall, ModelCallResult


class ModelCodeError(Exception):
    """Model code failed (import, initialize, execute, a malformed response); the message says where and why."""


@dataclass(slots=True)
class RequestData:
    """One request as a python model receives it."""

    inputs: dict[str, np.ndarray]
    requested_outputs: list[str] = field(default_factory=list)
    request_id: str = ""
    parameters: str = "{}"  # JSON text, as pb_utils.InferenceRequest.parameters() gives it
    correlation_id: int | str = 0
    flags: int = 0
    stream: int = 0  # a decoupled model's request: the number its responses go back under (0: not decoupled)
    cancelled: threading.Event | None = None  # set when the client gives up on a streamed request


# one response of a python model is the same plain data as one answer to a BLS call: outputs, or an error
# (message and pb_utils.TritonError code) the model put in its response
ResponseData = ModelCallResult


def install_python_utils() -> None:
    """Make `import triton_python_backend_utils` find Infera's implementation."""
    sys.modules.setdefault(pb_utils.MODULE_NAME, pb_utils)


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class ModelRunner:
    """A model.py imported as a module of its own, with one TritonPythonModel object."""

    def __init__(self, model_path: Path, module_name: str, model_name: str, host: pb_utils.ModelHost) -> None:
        self.model_path = Path(model_path)
        self.module_name = module_name
        self.model_name = model_name
        self.host = host
        self.model: Any = None
        self.module: ModuleType | None = None
        self.is_async = False
        self.decoupled = False  # model_transaction_policy { decoupled: true }: responses go through senders

    def load(self, args: dict[str, str]) -> None:
        """Import model.py and run `initialize(args)`; ModelCodeError with the reason otherwise."""
        model_class = self._model_class()
        self.is_async = inspect.iscoroutinefunction(getattr(model_class, "execute", None))
        config = json.loads(args.get("model_config") or "{}")
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        try:
            self.model = model_class()
            if hasattr(self.model, "initialize"):
                self._call(self.model.initialize, args)
        except Exception as exc:
            self.forget()
            raise ModelCodeError(f"initialize() of model '{self.model_name}' raised {describe(exc)}") from exc

    def auto_complete(self, config: dict[str, Any]) -> dict[str, Any]:
        """The config after the model's `auto_complete_config` (the config as given when it has none)."""
        model_class = self._model_class()
        hook = getattr(model_class, "auto_complete_config", None)
        if hook is None:
            return config
        try:
            completed = self._call(hook, pb_utils.ModelConfig(config))
        except Exception as exc:
            raise ModelCodeError(f"auto_complete_config() of model '{self.model_name}' raised {describe(exc)}") from exc
        finally:
            self.forget()
        if not isinstance(completed, pb_utils.ModelConfig):
            raise ModelCodeError(
                f"auto_complete_config() of model '{self.model_name}' must return the config it was given, "
                f"got {type(completed).__name__}"
            )
        return completed.as_dict()

    def execute(self, requests: list[RequestData]) -> list[ResponseData]:
        """Run one batch of requests; ModelCodeError when execute raises or answers the wrong number.

        A decoupled model answers through each request's response sender, now or later: nothing is returned here;
        when its execute raises, every request it has not finished gets the error as its last response.
        """
        batch = [self._request(data) for data in requests]
        try:
            if self.is_async:
                responses = self._call(lambda: pb_utils.run_coroutine(self.model.execute(batch)))
            else:
                responses = self._call(self.model.execute, batch)
        except Exception as exc:
            if self.decoupled:
                self._fail_unfinished(batch, f"model '{self.model_name}' raised {describe(exc)}")
                return []
            raise ModelCodeError(f"model '{self.model_name}' raised {describe(exc)}") from exc
        if self.decoupled:
            if responses is not None:
                self._fail_unfinished(
                    batch,
                    f"execute() of the decoupled model '{self.model_name}' must return None and send its responses "
                    "through each request's response sender",
                )
            return []
        if not isinstance(responses, (list, tuple)) or len(responses) != len(batch):
            count = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            raise ModelCodeError(
                f"execute() of model '{self.model_name}' must return one response per request ({len(batch)}), "
                f"got {count}"
            )
        return [self._response(response) for response in responses]

    def finalize(self) -> None:
        try:
            if self.model is not None and hasattr(self.model, "finalize"):
                self._call(self.model.finalize)
        finally:
            self.model = None
            self.forget()

    def forget(self) -> None:
        sys.modules.pop(self.module_name, None)

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        token = pb_utils.set_host(self.host)
        try:
            return fn(*args)
        finally:
            pb_utils.reset_host(token)

    def _model_class(self) -> type:
        install_python_utils()
        module = self.module or self._import()
        model_class = getattr(module, "TritonPythonModel", None)
        if model_class is None:
            self.forget()
            raise ModelCodeError(f"'{self.model_path.name}' defines no class TritonPythonModel")
        return model_class

    def _import(self) -> ModuleType:
        spec = importlib.util.spec_from_file_location(self.module_name, self.model_path)
        if spec is None or spec.loader is None:
            raise ModelCodeError(f"'{self.model_path.name}' cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module  # dataclasses and pickling look their module up here
        try:
            self._call(spec.loader.exec_module, module)
        except Exception as exc:
            self.forget()
            raise ModelCodeError(f"importing '{self.model_path.name}' raised {describe(exc)}") from exc
        self.module = module
        return module

    def _request(self, data: RequestData) -> pb_utils.InferenceRequest:
        request = pb_utils.InferenceRequest(
            request_id=data.request_id,
            correlation_id=data.correlation_id,
            inputs=[pb_utils.Tensor(name, array) for name, array in data.inputs.items()],
            requested_output_names=data.requested_outputs,
            model_name=self.model_name,
            flags=data.flags,
            parameters=data.parameters,
        )
        if data.stream:
            cancelled = data.cancelled or threading.Event()
            request._cancelled = cancelled
            request._response_sender = pb_utils.InferenceResponseSender(
                lambda response, final, stream=data.stream: self._deliver(stream, response, final),
                cancelled,
                data.requested_outputs,
            )
        return request

    def _deliver(self, stream: int, response: pb_utils.InferenceResponse | None, final: bool) -> None:
        """A response sender's response, as plain data, to the server (from whichever thread the model sends)."""
        self.host.respond(stream, None if response is None else self._response(response), final)

    def _fail_unfinished(self, batch: list[pb_utils.InferenceRequest], message: str) -> None:
        """End every request whose sender is still open with `message` as its last response."""
        error = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        for request in batch:
            sender = request._response_sender
            if sender is not None and not sender.is_closed():
                with contextlib.suppress(pb_utils.TritonModelException):  # closed meanwhile by another thread
                    sender.send(error, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def _response(self, response: Any) -> ResponseData:
        if not isinstance(response, pb_utils.InferenceResponse):
            raise ModelCodeError(
                f"execute() of model '{self.model_name}' returned a {type(response).__name__}, "
                "not a pb_utils.InferenceResponse"
            )
        if response.has_error():
            error = response.error()
            return ResponseData(error=str(error.message()), code=int(error.code()))
        return ResponseData(outputs={t.name(): t._array() for t in response.output_tensors()})


# ---- BLS requests between pb_utils objects and the engine's plain ModelCall


def model_call(request: pb_utils.InferenceRequest) -> ModelCall:
    """The plain call a BLS request of model code makes."""
    return ModelCall(
        model_name=request.model_name(),
        model_version=int(request.model_version()),
        inputs={tensor.name(): tensor._array() for tensor in request.inputs()},
        requested_outputs=request.requested_output_names(),
        parameters=json.loads(request.parameters()),
        request_id=request.request_id(),
        correlation_id=request.correlation_id(),
        flags=request.flags(),
        timeout_us=int(request.timeout()),
    )


def bls_responses(results: list[ModelCallResult]) -> list[pb_utils.InferenceResponse]:
    """The pb_utils responses model code reads from what the engine answered."""
    return [
        pb_utils.InferenceResponse(error=pb_utils.TritonError(result.error, result.code))
        if result.error
        else pb_utils.InferenceResponse([pb_utils.Tensor(name, array) for name, array in result.outputs.items()])
        for result in results
    ]
