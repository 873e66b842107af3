"""Shapes between the config and the model: `reshape`, the batch dimension that config dims leave out, and the
tensors a sequence model has beyond `input` and `output` (controls and implicit state)."""

from __future__ import annotations

import numpy as np

from engine.config.model_config import ModelConfig, TensorConfig
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


def sequence_tensors(config: ModelConfig) -> tuple[list[TensorConfig], list[TensorConfig]]:
    """The inputs the sequence batcher fills (each control [1], each state) and the state outputs it takes back.

    Dims leave out the batch dimension, as in `input`; a state output the config also lists in `output` (so
    clients may ask for it) appears in both.
    """
    sequencing = config.sequence_batching
    if sequencing is None:
        return [], []
    inputs = [
        TensorConfig(control_input.name, control.tensor_data_type, [1])
        for control_input in sequencing.control_input
        for control in control_input.control[:1]
    ]
    inputs += [TensorConfig(state.input_name, state.data_type, list(state.dims)) for state in sequencing.state]
    outputs = [TensorConfig(state.output_name, state.data_type, list(state.dims)) for state in sequencing.state]
    return inputs, outputs


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
