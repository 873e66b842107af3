"""Checks of request tensors against the model configuration, before anything is queued."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from math import prod

import numpy as np

from engine.config.datatypes import WIRE_TO_NUMPY
from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import InvalidArgument
from engine.protocol.tensors import shape_text

# configs whose input specs are remembered (a server serves a few versions; a config is resolved once at load)
SPEC_CACHE_SIZE = 256


@dataclass(frozen=True, slots=True)
class JsonPlan:
    """How the usual JSON form of a fixed-shape numeric input becomes its tensor: the checks array_from_json makes,
    worked out for this input once."""

    dtype: np.dtype
    kinds: str  # the numpy kinds np.asarray may find in acceptable data
    low: int | None  # the datatype's integer range, when values numpy holds as int64 must be checked against it
    high: int | None
    row: int  # elements a batch row (or the whole tensor of a model that does not batch) holds


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What one input of a config accepts, worked out once per config instead of once per request."""

    tensor: TensorConfig
    datatype: str
    expected: tuple[int, ...]  # the shape a client must send, -1 where any size goes
    max_batch_size: int  # 0 when the model does not batch
    model: str
    fixed: list[int] | None  # the expected shape after any batch dimension, when none of it is -1
    json: JsonPlan | None = None  # for a fixed-shape numeric input: how its flat JSON data becomes a tensor


_specs: OrderedDict[int, tuple[ModelConfig, dict[str, InputSpec]]] = OrderedDict()


def input_specs(config: ModelConfig) -> dict[str, InputSpec]:
    """The config's inputs by name, remembered per config object (held here, so its id is not reused)."""
    key = id(config)
    cached = _specs.get(key)
    if cached is not None and cached[0] is config:
        return cached[1]
    batching = config.max_batch_size > 0
    specs = {}
    for t in config.input:
        expected = tuple(expected_shape(config, t))
        tail = list(expected[1:] if batching else expected)
        fixed = None if -1 in tail else tail
        plan = json_plan(t.datatype, fixed) if fixed is not None else None
        specs[t.name] = InputSpec(t, t.datatype, expected, max(config.max_batch_size, 0), config.name, fixed, plan)
    _specs[key] = (config, specs)
    if len(_specs) > SPEC_CACHE_SIZE:
        _specs.popitem(last=False)
    return specs


def json_plan(datatype: str, fixed: list[int]) -> JsonPlan | None:
    """The JsonPlan of a numeric datatype that JSON carries (None for BYTES, FP16, BF16 and unknown types)."""
    if datatype in ("BYTES", "FP16", "BF16") or datatype not in WIRE_TO_NUMPY:
        return None
    dtype = WIRE_TO_NUMPY[datatype]
    row = prod(fixed)
    if datatype == "BOOL":
        return JsonPlan(dtype, "b", None, None, row)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return JsonPlan(dtype, "iu", int(info.min), int(info.max), row)
    return JsonPlan(dtype, "iuf", None, None, row)


def checked_batch(spec: InputSpec, datatype: str, shape: list[int]) -> int:
    """check_input over a precomputed spec: the same checks and messages, without rebuilding the expected shape."""
    if datatype != spec.datatype:
        raise InvalidArgument(f"input '{spec.tensor.name}' expects datatype {spec.datatype}, got {datatype}")
    expected = spec.expected
    if len(shape) != len(expected):
        raise _shape_error(spec, shape)
    if spec.fixed is not None:  # one list comparison instead of a loop over the dimensions
        if (shape[1:] if spec.max_batch_size else shape) != spec.fixed:
            raise _shape_error(spec, shape)
    else:
        for e, s in zip(expected, shape, strict=True):
            if e != -1 and e != s:
                raise _shape_error(spec, shape)
    if not spec.max_batch_size:
        return 1
    batch = shape[0]
    if batch > spec.max_batch_size or batch < 1:
        check_batch(spec.tensor.name, batch, spec.max_batch_size, spec.model)
    return batch


def _shape_error(spec: InputSpec, shape: list[int]) -> InvalidArgument:
    return InvalidArgument(
        f"input '{spec.tensor.name}' expects shape {shape_text(list(spec.expected))}, got {shape_text(shape)}"
    )


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
    check_batch(tensor.name, batch, config.max_batch_size, config.name)
    return batch


def check_batch(name: str, batch: int, max_batch_size: int, model: str) -> None:
    """A batch within 1..max_batch_size."""
    if batch > max_batch_size:
        raise InvalidArgument(
            f"input '{name}' has batch size {batch}, above max_batch_size {max_batch_size} of model '{model}'"
        )
    if batch < 1:
        raise InvalidArgument(f"input '{name}' has batch size 0; it must be at least 1")


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
