"""The usual JSON request on a short path: only its inputs (and perhaps an id), each a fixed-shape numeric input
in the config's datatype with flat `data`, as most clients send them.

Every check the general decoder (inference_request.py) makes is made here too, in fewer steps; anything else, and
any problem, answers None, and the general decoder takes the request and names what is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.config.model_config import ModelConfig
from engine.protocol.tensors import SMALL_LIST
from engine.protocol.validation import InputSpec, input_specs
from engine.types import InferenceRequest


def plain_request(
    document: dict[str, Any], config: ModelConfig, model_name: str, model_version: int | None
) -> InferenceRequest | None:
    """The request a plain document describes, or None when it is not plain (or not valid)."""
    entries = document.get("inputs")
    if type(entries) is not list:
        return None
    request_id = ""
    if len(document) != 1:
        request_id = document.get("id")
        if len(document) != 2 or type(request_id) is not str:
            return None
    specs = input_specs(config)
    if len(entries) != len(specs):
        return None  # an optional input left out, or one too many: the general path decides
    inputs: dict[str, np.ndarray] = {}
    batch = 0
    for entry in entries:
        if type(entry) is not dict or len(entry) != 4:
            return None
        name = entry.get("name")
        spec = specs.get(name) if type(name) is str else None
        if spec is None or spec.json is None or name in inputs:
            return None
        plain = plain_json_input(entry, spec)
        if plain is None or (batch and plain[1] != batch):
            return None
        inputs[name], batch = plain
    request = InferenceRequest(model_name, inputs, model_version, request_id)
    request.batch_size = batch if config.max_batch_size > 0 else 1
    return request


def plain_json_input(entry: dict[str, Any], spec: InputSpec) -> tuple[np.ndarray, int] | None:
    """The tensor and batch size of an input in the usual JSON form (the config's datatype and fixed shape, flat
    `data` of numbers of the right kind and range), checked as the general path checks it; None for any other
    form or any problem, which the general path then names."""
    shape = entry.get("shape")
    data = entry.get("data")
    if entry.get("datatype") != spec.datatype or type(shape) is not list or type(data) is not list:
        return None
    for d in shape:  # `type(d) is int` refuses booleans and floats, which compare equal to ints
        if type(d) is not int:
            return None
    plan = spec.json
    if spec.max_batch_size:
        batch = shape[0] if shape else 0
        if shape[1:] != spec.fixed or not 0 < batch <= spec.max_batch_size:
            return None
    elif shape == spec.fixed:
        batch = 1
    else:
        return None
    count = batch * plan.row
    if not count or len(data) != count or type(data[0]) is list:
        return None
    if plan.low is not None and count <= SMALL_LIST:
        # integers: Python ints only (a float or a bool is the general path's to judge), converted in one step,
        # numpy refusing any out of the type's range
        for v in data:
            if type(v) is not int:
                return None
        try:
            return np.array(data, dtype=plan.dtype).reshape(shape), batch
        except OverflowError:
            return None
    try:
        values = np.asarray(data)
    except (ValueError, TypeError, OverflowError):
        return None
    if values.dtype.kind not in plan.kinds:
        return None
    if plan.low is not None and values.dtype != plan.dtype:
        low, high = (min(data), max(data)) if count <= SMALL_LIST else (values.min(), values.max())
        if low < plan.low or high > plan.high:
            return None
    return values.astype(plan.dtype, copy=False).reshape(shape), batch
