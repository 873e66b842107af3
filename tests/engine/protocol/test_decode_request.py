"""Decoding v2 infer requests: JSON and binary inputs, parameters, requested outputs."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import InvalidArgument
from engine.protocol import decode_infer_request, parse_header_length
from tests.engine.protocol.builders import client_body, json_body, simple_inputs


def test_it_decodes_json_inputs_and_sets_the_batch_size(simple_config):
    body = json_body({"id": "r1", "inputs": simple_inputs(batch=2)})
    request = decode_infer_request(body, None, simple_config, model_version=1)
    assert request.model_name == "simple" and request.model_version == 1 and request.id == "r1"
    assert request.batch_size == 2
    assert request.inputs["INPUT0"].dtype == np.int32
    np.testing.assert_array_equal(request.inputs["INPUT0"], np.arange(32, dtype=np.int32).reshape(2, 16))
    assert request.requested_outputs is None


def test_it_accepts_nested_json_data(simple_config):
    inputs = simple_inputs()
    inputs[0]["data"] = [list(range(16))]
    request = decode_infer_request(json_body({"inputs": inputs}), None, simple_config)
    np.testing.assert_array_equal(request.inputs["INPUT0"][0], np.arange(16))


def test_it_decodes_what_tritonclient_sends_json_and_binary_mixed(simple_config):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 7, dtype=np.int32)
    body, header_length = client_body(
        [("INPUT0", a, "INT32", True), ("INPUT1", b, "INT32", False)], outputs=[("OUTPUT0", True)]
    )
    request = decode_infer_request(body, header_length, simple_config)
    np.testing.assert_array_equal(request.inputs["INPUT0"], a)
    np.testing.assert_array_equal(request.inputs["INPUT1"], b)
    assert [o.name for o in request.requested_outputs] == ["OUTPUT0"]
    assert request.requested_outputs[0].parameters == {"binary_data": True}


def test_it_decodes_fp16_bytes_and_bool_from_binary_leaving_reshape_to_the_backend(mixed_config):
    f32 = np.array([[1.5, 2.5, 3.5], [4, 5, 6]], dtype=np.float32)
    f16 = np.array([0.5, 1, 2], dtype=np.float16)
    text = np.array([b"a", b"", b"\x00\xffz"], dtype=object)
    flag = np.array([True, False])
    flat = np.arange(4, dtype=np.float32)
    body, header_length = client_body(
        [
            ("F32", f32, "FP32", True),
            ("F16", f16, "FP16", True),
            ("TEXT", text, "BYTES", True),
            ("FLAG", flag, "BOOL", True),
            ("FLAT", flat, "FP32", False),
        ]
    )
    request = decode_infer_request(body, header_length, mixed_config)
    np.testing.assert_array_equal(request.inputs["F32"], f32)
    assert request.inputs["F16"].dtype == np.float16
    np.testing.assert_array_equal(request.inputs["F16"], f16)
    assert request.inputs["TEXT"].dtype == object and request.inputs["TEXT"].tolist() == text.tolist()
    np.testing.assert_array_equal(request.inputs["FLAG"], flag)
    assert request.inputs["FLAT"].shape == (4,)
    assert request.batch_size == 1
    assert "SMALL" not in request.inputs


def test_it_decodes_bytes_given_as_json_strings_next_to_a_binary_fp16(mixed_config):
    f16 = np.array([1, 2, 3], dtype=np.float16)
    header = json_body(
        {
            "inputs": [
                {"name": "F32", "datatype": "FP32", "shape": [2, 1], "data": [1, 2.5]},
                {"name": "F16", "datatype": "FP16", "shape": [3], "parameters": {"binary_data_size": 6}},
                {"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": [["héllo"], ["x"]]},
                {"name": "FLAG", "datatype": "BOOL", "shape": [2], "data": [True, False]},
            ]
        }
    )
    request = decode_infer_request(header + f16.tobytes(), len(header), mixed_config)
    assert request.inputs["TEXT"].tolist() == ["héllo".encode(), b"x"]
    np.testing.assert_array_equal(request.inputs["F16"], f16)
    np.testing.assert_array_equal(request.inputs["F32"], [[1], [2.5]])


def test_it_moves_reserved_parameters_into_fields_and_passes_the_rest(simple_config):
    body, header_length = client_body(
        [
            ("INPUT0", np.zeros((1, 16), np.int32), "INT32", False),
            ("INPUT1", np.zeros((1, 16), np.int32), "INT32", False),
        ],
        sequence_id=42,
        sequence_start=True,
        sequence_end=False,
        priority=2,
        timeout=5000,
        parameters={"custom": "value"},
    )
    request = decode_infer_request(body, header_length, simple_config)
    assert (request.sequence_id, request.sequence_start, request.sequence_end) == (42, True, False)
    assert request.priority == 2 and request.timeout_us == 5000
    assert request.parameters == {"binary_data_output": True, "custom": "value"}


def test_it_accepts_a_string_sequence_id(simple_config):
    body = json_body({"inputs": simple_inputs(), "parameters": {"sequence_id": "abc", "sequence_end": True}})
    request = decode_infer_request(body, None, simple_config)
    assert request.sequence_id == "abc" and request.sequence_end is True


def test_it_parses_the_header_length_header():
    assert parse_header_length(None) is None
    assert parse_header_length(b"120") == 120
    with pytest.raises(InvalidArgument, match="is not a byte count"):
        parse_header_length(b"-5")
