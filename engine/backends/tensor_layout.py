"""Shapes between the config and the model: `reshape`, and the batch dimension that config dims leave out."""

from __future__ import annotations

import numpy as np

from engine.config import ModelConfig, TensorConfig
from engine.errors import LoadError


def to_model_shape(array: np.ndarray, tensor: TensorConfig | None, batched: bool) -> np.ndarray:
    """An input as the model takes it: the config's `reshape` replaces `dims` behind the batch dimension."""
    if tensor is None or tensor.reshape is None:
        return array
    lead = array.shape[:1] if batched else ()
    return array.reshape(lead + tuple(tensor.reshape))


def to_config_shape(array: np.ndarray, tensor: TensorConfig | None, batched: bool) -> np.ndarray:
    """An output as the config declares it: the model's shape (the `reshape`) turned back into `dims`."""
    if tensor is None or tensor.reshape is None:
        return array
    lead = array.shape[:1] if batched else ()
    return array.reshape(lead + tuple(tensor.dims))


def int_parameter(config: ModelConfig, *names: str) -> int | None:
    """The first of `names` set in `config.parameters`, as a non-negative integer; None when none is set."""
    for name in names:
        raw = config.parameters.get(name)
        if raw is None or raw == "":
            continue
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < 0:
            raise LoadError(f"parameter '{name}' must be a non-negative integer, got '{raw}'")
        return value
    return None
