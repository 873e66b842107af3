"""The model configuration as model code reads it (`json.loads(args["model_config"])` and its helpers) and the
`ModelConfig` that `auto_complete_config` fills."""

from __future__ import annotations

import json
from typing import Any

from engine.backends.python_api_errors import TritonModelException
from engine.config.datatypes import config_to_wire, numpy_dtype


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
