"""Every malformed infer request is refused with an InvalidArgument naming what is wrong."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest

from engine.errors import InvalidArgument
from engine.protocol import decode_infer_request
from tests.engine.protocol.builders import json_body, simple_inputs


def _simple(inputs: list[dict[str, Any]] | None = None, **extra: Any) -> bytes:
    return json_body({"inputs": simple_inputs() if inputs is None else inputs, **extra})


def _with(index: int, **changes: Any) -> list[dict[str, Any]]:
    inputs = simple_inputs()
    inputs[index].update(changes)
    return inputs


SIMPLE_CASES = [
    ("malformed json", b'{"inputs": [', "malformed JSON"),
    ("not an object", b"[1, 2]", "must be a JSON object"),
    ("no inputs", json_body({}), "must have an 'inputs' list"),
    ("input not an object", _simple([1]), "must be a JSON object"),
    ("input without name", _simple([{"datatype": "INT32"}]), "needs a 'name'"),
    (
        "unknown input",
        _simple([*simple_inputs(), {"name": "X", "datatype": "INT32", "shape": [1], "data": [1]}]),
        "unexpected inference input 'X' for model 'simple'",
    ),
    ("duplicate input", _simple([*simple_inputs(), simple_inputs()[0]]), "^input 'INPUT0' already exists in request"),
    ("missing input", _simple(simple_inputs()[:1]), "missing required input\\(s\\) 'INPUT1'"),
    ("wrong datatype", _simple(_with(0, datatype="FP32")), "input 'INPUT0' expects datatype INT32, got FP32"),
    ("datatype not a string", _simple(_with(0, datatype=3)), "needs a 'datatype' string"),
    (
        "wrong shape",
        _simple(_with(0, shape=[2, 15], data=[0] * 30)),
        "input 'INPUT0' expects shape \\[-1, 16\\], got \\[2, 15\\]",
    ),
    ("missing batch dim", _simple(_with(0, shape=[16])), "expects shape \\[-1, 16\\], got \\[16\\]"),
    ("negative dim", _simple(_with(0, shape=[-1, 16])), "'shape' list of non-negative integers"),
    ("bool dim", _simple(_with(0, shape=[True, 16])), "'shape' list of non-negative integers"),
    (
        "batch above max",
        _simple([dict(i, shape=[9, 16], data=[0] * 144) for i in simple_inputs()]),
        "batch size 9, above max_batch_size 8 of model 'simple'",
    ),
    ("batch zero", _simple([dict(i, shape=[0, 16], data=[]) for i in simple_inputs()]), "batch size 0"),
    ("different batches", _simple(_with(1, shape=[2, 16], data=[0] * 32)), "different batch sizes"),
    (
        "too few values",
        _simple(_with(0, data=list(range(15)))),
        "input 'INPUT0' has 15 values in 'data' but shape \\[1, 16\\] needs 16",
    ),
    ("strings for ints", _simple(_with(0, data=["a"] * 16)), "INT32 expects integers"),
    ("floats for ints", _simple(_with(0, data=[0.5] * 16)), "INT32 expects integers"),
    ("out of range", _simple(_with(0, data=[2**40] * 16)), "out of range for datatype INT32"),
    ("ragged nesting", _simple(_with(0, data=[[1, 2], [3]])), "not a regular list"),
    ("data not a list", _simple(_with(0, data=5)), "expects 'data' to be a list"),
    (
        "no data",
        _simple([{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16]}, simple_inputs()[1]]),
        "neither 'data' nor 'binary_data_size'",
    ),
    ("shared memory", _simple(_with(0, parameters={"shared_memory_region": "r"})), "shared memory"),
    ("unknown output", _simple(outputs=[{"name": "NOPE"}]), "unexpected inference output 'NOPE' for model 'simple'"),
    ("duplicate output", _simple(outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}]), "more than once"),
    ("outputs not a list", _simple(outputs={"name": "OUTPUT0"}), "'outputs' must be a list"),
    (
        "classification",
        _simple(outputs=[{"name": "OUTPUT0", "parameters": {"classification": 0}}]),
        "'classification' parameter that is not a positive integer",
    ),
    (
        "binary_data not bool",
        _simple(outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": 1}}]),
        "'binary_data' parameter",
    ),
    ("id not a string", _simple(id=5), "'id' must be a string"),
    ("parameters not an object", _simple(parameters=[1]), "'parameters' must be a JSON object"),
    ("negative priority", _simple(parameters={"priority": -1}), "'priority'"),
    ("timeout as string", _simple(parameters={"timeout": "5"}), "'timeout'"),
    ("sequence_start not bool", _simple(parameters={"sequence_start": 1}), "'sequence_start'"),
    ("sequence_id float", _simple(parameters={"sequence_id": 1.5}), "'sequence_id'"),
    ("binary_data_output not bool", _simple(parameters={"binary_data_output": "yes"}), "'binary_data_output'"),
]


@pytest.mark.parametrize(("body", "message"), [c[1:] for c in SIMPLE_CASES], ids=[c[0] for c in SIMPLE_CASES])
def test_it_refuses_a_bad_json_request(simple_config, body, message):
    with pytest.raises(InvalidArgument, match=message):
        decode_infer_request(body, None, simple_config)


def _binary_request(parameters: dict[str, Any], payload: bytes, datatype: str = "INT32") -> tuple[bytes, int]:
    inputs = simple_inputs()
    inputs[0] = {"name": "INPUT0", "datatype": datatype, "shape": [1, 16], "parameters": parameters}
    header = orjson.dumps({"inputs": inputs})
    return header + payload, len(header)


def test_it_refuses_a_header_length_beyond_the_body(simple_config):
    body = _simple()
    with pytest.raises(
        InvalidArgument, match=f"Inference-Header-Content-Length 9999 is beyond the body of {len(body)}"
    ):
        decode_infer_request(body, 9999, simple_config)


@pytest.mark.parametrize(
    ("size", "payload", "message"),
    [
        (64, 32, "binary_data_size 64 but only 32 bytes"),
        (60, 60, "has 60 bytes of binary data but shape \\[1, 16\\] of INT32 needs 64"),
        (64, 70, "6 bytes of binary data no input claims"),
    ],
    ids=["size beyond the binary section", "size against the shape", "unclaimed bytes"],
)
def test_it_refuses_binary_sizes_that_do_not_add_up(simple_config, size, payload, message):
    body, header_length = _binary_request({"binary_data_size": size}, b"\x00" * payload)
    with pytest.raises(InvalidArgument, match=message):
        decode_infer_request(body, header_length, simple_config)


def test_it_refuses_binary_data_without_the_header_length(simple_config):
    body, _ = _binary_request({"binary_data_size": 64}, b"\x00" * 64)
    with pytest.raises(InvalidArgument, match="malformed JSON"):
        decode_infer_request(body, None, simple_config)


def test_it_refuses_both_data_and_binary_size(simple_config):
    inputs = _with(0, parameters={"binary_data_size": 64})
    header = orjson.dumps({"inputs": inputs})
    with pytest.raises(InvalidArgument, match="both 'data' and 'binary_data_size'"):
        decode_infer_request(header + b"\x00" * 64, len(header), simple_config)


def test_it_refuses_a_binary_size_that_is_not_a_count(simple_config):
    body, header_length = _binary_request({"binary_data_size": "64"}, b"")
    with pytest.raises(InvalidArgument, match="not a byte count"):
        decode_infer_request(body, header_length, simple_config)


def test_it_refuses_fp16_as_json(mixed_config):
    body = json_body({"inputs": [{"name": "F16", "datatype": "FP16", "shape": [3], "data": [1, 2, 3]}]})
    with pytest.raises(InvalidArgument, match="input 'F16' of datatype FP16 must be sent as binary data"):
        decode_infer_request(body, None, mixed_config)


def _bytes_request(payload: bytes) -> tuple[bytes, int]:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "TEXT", "datatype": "BYTES", "shape": [2], "parameters": {"binary_data_size": len(payload)}}
            ]
        }
    )
    return header + payload, len(header)


def test_it_refuses_a_bytes_element_longer_than_its_buffer(mixed_config):
    body, header_length = _bytes_request(struct.pack("<I", 1) + b"a" + struct.pack("<I", 100) + b"bc")
    with pytest.raises(InvalidArgument, match="BYTES element of 100 bytes at byte 5, beyond the 11 bytes"):
        decode_infer_request(body, header_length, mixed_config)


def test_it_refuses_a_truncated_bytes_length_prefix(mixed_config):
    body, header_length = _bytes_request(struct.pack("<I", 1) + b"a" + b"\x01\x00")
    with pytest.raises(InvalidArgument, match="truncated BYTES length prefix"):
        decode_infer_request(body, header_length, mixed_config)


def test_it_refuses_a_bytes_element_count_that_does_not_match_the_shape(mixed_config):
    body, header_length = _bytes_request(struct.pack("<I", 1) + b"a")
    with pytest.raises(InvalidArgument, match="has 1 BYTES elements but its shape needs 2"):
        decode_infer_request(body, header_length, mixed_config)


def test_it_refuses_bytes_json_data_that_is_not_strings(mixed_config):
    body = json_body({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["a", 1]}]})
    with pytest.raises(InvalidArgument, match="BYTES expects strings"):
        decode_infer_request(body, None, mixed_config)


def test_it_refuses_bool_bytes_other_than_zero_and_one(mixed_config):
    header = orjson.dumps(
        {"inputs": [{"name": "FLAG", "datatype": "BOOL", "shape": [2], "parameters": {"binary_data_size": 2}}]}
    )
    with pytest.raises(InvalidArgument, match="bytes other than 0 and 1"):
        decode_infer_request(header + b"\x01\x07", len(header), mixed_config)


def test_it_refuses_numbers_for_a_bool_input(mixed_config):
    body = json_body({"inputs": [{"name": "FLAG", "datatype": "BOOL", "shape": [2], "data": [1, 0]}]})
    with pytest.raises(InvalidArgument, match="BOOL expects true or false"):
        decode_infer_request(body, None, mixed_config)


def test_it_refuses_a_uint8_value_that_would_wrap(mixed_config):
    body = json_body({"inputs": [{"name": "SMALL", "datatype": "UINT8", "shape": [2], "data": [1, 256]}]})
    with pytest.raises(InvalidArgument, match="out of range for datatype UINT8"):
        decode_infer_request(body, None, mixed_config)


def test_it_accepts_integers_for_a_float_input(mixed_config):
    f16 = np.zeros(3, np.float16).tobytes()
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "F32", "datatype": "FP32", "shape": [2, 2], "data": [1, 2, 3, 4]},
                {"name": "F16", "datatype": "FP16", "shape": [3], "parameters": {"binary_data_size": 6}},
                {"name": "TEXT", "datatype": "BYTES", "shape": [0], "data": []},
                {"name": "FLAG", "datatype": "BOOL", "shape": [2], "data": [[True], [False]]},
            ]
        }
    )
    request = decode_infer_request(header + f16, len(header), mixed_config)
    assert request.inputs["F32"].dtype == np.float32
    assert request.inputs["TEXT"].shape == (0,)
