"""Fuzz the infer-request decoder: whatever arrives, it answers a request or an InvalidArgument."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config.model_config import ModelConfig
from engine.errors import InvalidArgument
from engine.protocol import decode_infer_request
from engine.types import InferenceRequest

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20,
)
names = st.sampled_from(["INPUT0", "INPUT1", "F32", "F16", "TEXT", "FLAG", "SMALL", "FLAT", "X", ""])
datatypes = st.sampled_from(["INT32", "FP32", "FP16", "BF16", "BYTES", "BOOL", "UINT8", "INT64", "NOPE"])
shapes = st.lists(st.integers(min_value=-2, max_value=20), max_size=3) | json_values
parameters = st.fixed_dictionaries(
    {},
    optional={
        "binary_data_size": st.integers(min_value=-1, max_value=80) | json_scalars,
        "shared_memory_region": st.text(max_size=3),
    },
)
inputs = st.fixed_dictionaries(
    {"name": names, "datatype": datatypes, "shape": shapes},
    optional={"data": json_values | st.lists(st.integers(-300, 300), max_size=40), "parameters": parameters},
)
documents = st.fixed_dictionaries(
    {"inputs": st.lists(inputs, max_size=4) | json_values},
    optional={
        "id": json_scalars,
        "parameters": st.dictionaries(
            st.sampled_from(["sequence_id", "priority", "timeout", "binary_data_output", "sequence_end", "x"]),
            json_scalars,
        ),
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": names}, optional={"parameters": st.dictionaries(st.text(max_size=12), json_scalars)}
            ),
            max_size=3,
        )
        | json_values,
    },
)


def _decode(body: bytes, header_length: int | None, config: ModelConfig) -> None:
    try:
        result = decode_infer_request(body, header_length, config)
    except InvalidArgument:
        return
    assert isinstance(result, InferenceRequest)
    for name, array in result.inputs.items():
        tensor = config.input_named(name)
        assert tensor is not None and array.dtype.kind in "biufO"


@FUZZ
@given(body=st.binary(max_size=200), header_length=st.none() | st.integers(min_value=-5, max_value=220))
def test_it_answers_random_bytes_with_invalid_argument_only(simple_config, body, header_length):
    _decode(body, header_length, simple_config)


@FUZZ
@given(document=documents, tail=st.binary(max_size=80), split=st.booleans())
def test_it_answers_random_json_requests_with_invalid_argument_only(simple_config, mixed_config, document, tail, split):
    header = orjson.dumps(document)
    body: Any = header + tail if split else header
    for config in (simple_config, mixed_config):
        _decode(body, len(header) if split else None, config)
