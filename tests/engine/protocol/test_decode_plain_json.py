"""The usual JSON request (inputs of name, datatype, shape and flat data, perhaps an id) decodes on a short path with
the general path's results."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import InvalidArgument
from engine.protocol import decode_infer_request

DATATYPES = ["INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FP32", "FP64", "BOOL"]
CONFIGS = {
    (datatype, batching): ModelConfig(
        name="m",
        max_batch_size=4 if batching else 0,
        input=[TensorConfig("X", f"TYPE_{'STRING' if datatype == 'BYTES' else datatype}", [2, 3])],
        output=[TensorConfig("Y", "TYPE_FP32", [1])],
    )
    for datatype in DATATYPES
    for batching in (True, False)
}
scalars = st.one_of(
    st.integers(min_value=-(2**65), max_value=2**65),
    st.integers(min_value=-300, max_value=300),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.text(max_size=2),
    st.none(),
)
uniform_data = st.one_of(
    st.lists(st.integers(min_value=-300, max_value=300), min_size=1, max_size=30),
    st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), min_size=1, max_size=30),
    st.lists(st.booleans(), min_size=1, max_size=30),
)
shapes = st.one_of(
    st.tuples(st.integers(min_value=-1, max_value=6), st.just(2), st.just(3)).map(list),
    st.just([2, 3]),
    st.lists(st.one_of(st.integers(min_value=0, max_value=4), st.just(2.0), st.just(True)), max_size=4),
)


def _outcome(entry: dict[str, Any], config: ModelConfig) -> tuple[str, Any]:
    """What decoding a request of this one input gives: its array (dtype, shape, values) or the error message."""
    try:
        # the standard library writes integers of any size, as some clients do
        request = decode_infer_request(json.dumps({"inputs": [entry]}).encode(), None, config)
    except InvalidArgument as exc:
        return "error", exc.message
    array = request.inputs["X"]
    return "array", (str(array.dtype), array.shape, array.tolist(), request.batch_size)


def _both_ways(entry: dict[str, Any], config: ModelConfig) -> tuple[tuple, tuple]:
    """The outcome of the entry as sent, and of the same entry through the general path (empty parameters)."""
    return _outcome(entry, config), _outcome({**entry, "parameters": {}}, config)


@settings(max_examples=600, deadline=None)
@given(
    datatype=st.sampled_from(DATATYPES),
    batching=st.booleans(),
    shape=shapes,
    data=st.one_of(uniform_data, st.lists(scalars, min_size=1, max_size=30)),
    sent_type=st.sampled_from(DATATYPES + ["FP16"]),
)
def test_it_decodes_every_plain_input_as_the_general_path_does(datatype, batching, shape, data, sent_type) -> None:
    entry = {"name": "X", "datatype": sent_type, "shape": shape, "data": data}
    short, general = _both_ways(entry, CONFIGS[(datatype, batching)])
    assert short == general


@pytest.mark.parametrize("datatype", DATATYPES)
def test_it_decodes_a_well_formed_plain_input_of_each_datatype(datatype: str) -> None:
    rows = [[1, 0, 1, 1, 0, 1], [0, 1, 1, 0, 0, 1]]
    data = [bool(v) for row in rows for v in row] if datatype == "BOOL" else [v for row in rows for v in row]
    entry = {"name": "X", "datatype": datatype, "shape": [2, 2, 3], "data": data}
    short, general = _both_ways(entry, CONFIGS[(datatype, True)])
    assert short == general
    kind, (dtype, shape, values, batch) = short
    assert kind == "array" and shape == (2, 2, 3) and batch == 2
    assert np.array(values).reshape(-1).tolist() == data


@pytest.mark.parametrize(
    ("datatype", "data", "message"),
    [
        ("INT8", [1, 2, 3, 4, 5, 300], "out of range for datatype INT8"),
        ("UINT32", [1, 2, 3, 4, 5, -1], "out of range for datatype UINT32"),
        ("INT32", [1, 2, 3, 4, 5, 0.5], "INT32 expects integers"),
        ("FP32", [1, 2, 3, 4, 5, "x"], "expects numbers"),
        ("BOOL", [True, False, True, 1, 0, 1], "BOOL expects true or false"),
    ],
)
def test_it_refuses_a_plain_input_with_the_general_paths_message(datatype: str, data: list, message: str) -> None:
    entry = {"name": "X", "datatype": datatype, "shape": [1, 2, 3], "data": data}
    short, general = _both_ways(entry, CONFIGS[(datatype, True)])
    assert short == general
    assert short[0] == "error" and message in short[1]


def test_it_refuses_a_plain_input_sent_twice() -> None:
    entry = {"name": "X", "datatype": "FP32", "shape": [1, 2, 3], "data": [0.0] * 6}
    with pytest.raises(InvalidArgument, match="appears more than once"):
        decode_infer_request(orjson.dumps({"inputs": [entry, entry]}), None, CONFIGS[("FP32", True)])


TWO_INPUTS = ModelConfig(
    name="two",
    max_batch_size=8,
    input=[TensorConfig("A", "TYPE_INT32", [3]), TensorConfig("B", "TYPE_FP32", [2])],
    output=[TensorConfig("Y", "TYPE_FP32", [1])],
)
two_input_entries = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["A", "B", "C"]),
        "datatype": st.sampled_from(["INT32", "FP32"]),
        "shape": st.sampled_from([[1, 3], [2, 3], [1, 2], [2, 2]]),
        "data": st.lists(st.integers(min_value=-5, max_value=5), min_size=2, max_size=6),
    }
)


def _request_outcome(document: dict[str, Any]) -> tuple[str, Any]:
    try:
        request = decode_infer_request(json.dumps(document).encode(), None, TWO_INPUTS)
    except InvalidArgument as exc:
        return "error", exc.message
    arrays = {name: (str(a.dtype), a.shape, a.tolist()) for name, a in request.inputs.items()}
    return "request", (request.model_name, request.id, request.batch_size, arrays, request.parameters)


@settings(max_examples=400, deadline=None)
@given(
    entries=st.lists(two_input_entries, min_size=0, max_size=3),
    request_id=st.one_of(st.none(), st.text(max_size=4), st.integers()),
)
def test_it_decodes_every_plain_request_as_the_general_path_does(entries, request_id) -> None:
    document: dict[str, Any] = {"inputs": entries}
    if request_id is not None:
        document["id"] = request_id
    # empty request parameters send the same request through the general path
    assert _request_outcome(document) == _request_outcome({**document, "parameters": {}})
