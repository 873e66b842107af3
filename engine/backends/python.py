"""The python backend: a user's model.py with Triton's `TritonPythonModel` (initialize, execute, finalize).

Unlike Triton, the model runs inside the server process (on its instance's worker thread), with no stub
process and no shared-memory copies; requests reach `execute` one object each, never concatenated.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import logging
import re
import sys
from types import ModuleType
from typing import Any

import numpy as np

from engine.backends import python_utils as pb_utils
from engine.backends import register_backend
from engine.backends.base import Backend
from engine.config import ModelConfig
from engine.config_format import config_to_dict
from engine.datatypes import config_to_wire, numpy_dtype
from engine.errors import BackendError, LoadError

log = logging.getLogger("infera.engine")

_module_numbers = itertools.count()


def install_python_utils() -> None:
    """Make `import triton_python_backend_utils` find Infera's implementation."""
    sys.modules.setdefault(pb_utils.MODULE_NAME, pb_utils)


@register_backend
class PythonBackend(Backend):
    """Loads model.py as a module of its own per instance and calls its TritonPythonModel."""

    name = "python"

    @classmethod
    def code_in(cls, config: ModelConfig) -> str | None:
        return f"{config.model_filename} runs code inside the server"

    def load(self) -> None:
        self.require_model_file()
        install_python_utils()
        safe_name = re.sub(r"\W", "_", self.config.name)
        self.module_name = f"infera_model_{safe_name}_{self.version_path.name}_{next(_module_numbers)}"
        self.module = self._import()
        model_class = getattr(self.module, "TritonPythonModel", None)
        if model_class is None:
            self._forget_module()
            raise LoadError(f"'{self.model_path.name}' defines no class TritonPythonModel")
        try:
            self.model = model_class()
            if hasattr(self.model, "initialize"):
                self.model.initialize(self.initialize_args())
        except Exception as exc:
            self._forget_module()
            raise LoadError(f"initialize() of model '{self.config.name}' raised {_describe(exc)}") from exc
        self._output_names = [t.name for t in self.config.output]
        self._version = int(self.version_path.name) if self.version_path.name.isdigit() else -1

    def _import(self) -> ModuleType:
        spec = importlib.util.spec_from_file_location(self.module_name, self.model_path)
        if spec is None or spec.loader is None:
            raise LoadError(f"'{self.model_path.name}' cannot be imported as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[self.module_name] = module  # dataclasses and pickling look their module up here
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            self._forget_module()
            raise LoadError(f"importing '{self.model_path.name}' raised {_describe(exc)}") from exc
        return module

    def initialize_args(self) -> dict[str, str]:
        """The `args` Triton passes to initialize(): every value a string, the config as JSON."""
        return {
            "model_config": json.dumps(config_to_dict(self.config)),
            "model_instance_kind": self.device.kind,
            "model_instance_name": f"{self.config.name}_0",
            "model_instance_device_id": str(self.device.id),
            "model_repository": str(self.version_path.parent),
            "model_version": self.version_path.name,
            "model_name": self.config.name,
        }

    def prepare(self, requests: list[dict[str, np.ndarray]]) -> list[pb_utils.InferenceRequest]:
        """One request object per request: a python model sees requests, never a concatenated batch."""
        return [
            pb_utils.InferenceRequest(
                [pb_utils.Tensor(name, array) for name, array in inputs.items()],
                requested_output_names=self._output_names,
                model_name=self.config.name,
                model_version=self._version,
            )
            for inputs in requests
        ]

    def execute(self, batch: list[pb_utils.InferenceRequest]) -> list[dict[str, np.ndarray]]:
        try:
            responses = self.model.execute(batch)
        except Exception as exc:
            raise BackendError(f"model '{self.config.name}' raised {_describe(exc)}") from exc
        if not isinstance(responses, (list, tuple)) or len(responses) != len(batch):
            count = len(responses) if isinstance(responses, (list, tuple)) else type(responses).__name__
            raise BackendError(
                f"execute() of model '{self.config.name}' must return one response per request "
                f"({len(batch)}), got {count}"
            )
        return [self._outputs_of(response) for response in responses]

    def _outputs_of(self, response: Any) -> dict[str, np.ndarray]:
        if not isinstance(response, pb_utils.InferenceResponse):
            raise BackendError(
                f"execute() of model '{self.config.name}' returned a {type(response).__name__}, "
                "not a pb_utils.InferenceResponse"
            )
        if response.has_error():
            raise BackendError(f"model '{self.config.name}' failed: {response.error().message()}")
        outputs = {}
        for tensor in response.output_tensors():
            outputs[tensor.name()] = self._as_config_type(tensor.name(), tensor.as_numpy())
        return outputs

    def _as_config_type(self, name: str, array: np.ndarray) -> np.ndarray:
        """The output as the engine carries it (BYTES as object arrays of bytes), checked against the config."""
        declared = self.config.output_named(name)
        if array.dtype.kind in "OSU":
            array = _bytes_array(array)
        if declared is None:
            return array
        wire = config_to_wire(declared.data_type)
        expected = numpy_dtype(wire)
        if array.dtype != expected:
            actual = "BYTES" if array.dtype.kind == "O" else str(array.dtype)
            raise BackendError(
                f"output '{name}' of model '{self.config.name}' is {actual}, the config says {declared.data_type}"
            )
        return array

    def split(self, outputs: list[dict[str, np.ndarray]], batch_sizes: list[int]) -> list[dict[str, np.ndarray]]:
        """Already one dict per request."""
        return outputs

    def unload(self) -> None:
        model = getattr(self, "model", None)
        if model is not None and hasattr(model, "finalize"):
            try:
                model.finalize()
            except Exception as exc:  # unloading goes on: the version is leaving either way
                log.warning("finalize() of model '%s' raised %s", self.config.name, _describe(exc))
        self.model = None
        self._forget_module()

    def _forget_module(self) -> None:
        sys.modules.pop(getattr(self, "module_name", ""), None)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _bytes_array(array: np.ndarray) -> np.ndarray:
    """str, fixed-width bytes or mixed object elements as an object array of bytes."""
    if array.dtype.kind == "S":
        return array.astype(object)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8").astype(object)
    if all(isinstance(item, bytes) for item in array.flat):
        return array
    items = [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in array.flat]
    return np.array(items, dtype=object).reshape(array.shape)
