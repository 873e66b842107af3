"""Checks of request tensors against the model configuration, before anything is queued."""

from __future__ import annotations

import numpy as np

from engine.config import ModelConfig, TensorConfig
from engine.errors import InvalidArgument
from engine.protocol.tensors import shape_text


def input_config(config: ModelConfig, name: str) -> TensorConfig:
    """The config entry of input `name`; an unknown name is the client's error."""
    tensor = config.input_named(name)
    if tensor is None:
        raise InvalidArgument(f"unexpected inference input '{name}' for model '{config.name}'")
    return tensor


def expected_shape(config: ModelConfig, tensor: TensorConfig) -> list[int]:
    """The shape a client must send: dims, after a -1 batch dimension when the model batches."""
    return [-1, *tensor.dims] if config.max_batch_size > 0 else list(tensor.dims)


def check_input(config: ModelConfig, tensor: TensorConfig, datatype: str, shape: list[int]) -> int:
    """Check datatype and shape of one input; return its batch size (1 when the model does not batch)."""
    if datatype != tensor.datatype:
        raise InvalidArgument(f"input '{tensor.name}' expects datatype {tensor.datatype}, got {datatype}")
    expected = expected_shape(config, tensor)
    if len(shape) != len(expected) or any(e != -1 and e != s for e, s in zip(expected, shape, strict=True)):
        raise InvalidArgument(f"input '{tensor.name}' expects shape {shape_text(expected)}, got {shape_text(shape)}")
    if config.max_batch_size <= 0:
        return 1
    batch = shape[0]
    if batch > config.max_batch_size:
        raise InvalidArgument(
            f"input '{tensor.name}' has batch size {batch}, above max_batch_size "
            f"{config.max_batch_size} of model '{config.name}'"
        )
    if batch < 1:
        raise InvalidArgument(f"input '{tensor.name}' has batch size 0; it must be at least 1")
    return batch


def check_required_inputs(config: ModelConfig, given: dict[str, np.ndarray]) -> None:
    """Every non-optional input of the config must be present."""
    missing = [t.name for t in config.input if not t.optional and t.name not in given]
    if missing:
        names = ", ".join(f"'{n}'" for n in missing)
        raise InvalidArgument(f"model '{config.name}' is missing required input(s) {names}")


def common_batch_size(config: ModelConfig, batches: dict[str, int]) -> int:
    """All inputs of a batching model share one batch size."""
    if not batches:
        return 1
    sizes = set(batches.values())
    if len(sizes) > 1:
        detail = ", ".join(f"'{n}' has {b}" for n, b in batches.items())
        raise InvalidArgument(f"inputs of model '{config.name}' have different batch sizes: {detail}")
    return sizes.pop()
