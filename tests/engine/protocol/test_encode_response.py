"""Encoding v2 infer responses, read back with tritonclient's own response parser."""

from __future__ import annotations

import numpy as np
import orjson
from tritonclient.http import InferResult

from engine.protocol import decode_infer_request, encode_infer_response
from engine.types import InferenceRequest, InferenceResponse, RequestedOutput
from tests.engine.protocol.builders import client_body


def _request(requested: list[tuple[str, bool | None]] | None = None, binary_output: bool = False) -> InferenceRequest:
    outputs = None
    if requested is not None:
        outputs = [RequestedOutput(n, {} if b is None else {"binary_data": b}) for n, b in requested]
    parameters = {"binary_data_output": True} if binary_output else {}
    return InferenceRequest("m", {}, id="abc", requested_outputs=outputs, parameters=parameters)


def _response() -> InferenceResponse:
    return InferenceResponse(
        "m",
        3,
        {
            "A": np.arange(6, dtype=np.float32).reshape(2, 3),
            "B": np.array([[1, -2]], dtype=np.int64),
            "T": np.array([b"x", "y\u00e9".encode()], dtype=object),
            "H": np.array([1.5, 2], dtype=np.float16),
        },
    )


def _read(body: bytes, header_length: int | None) -> InferResult:
    return InferResult.from_response_body(body, header_length=header_length)


def test_it_encodes_json_outputs_with_model_version_as_a_string():
    body, header_length = encode_infer_response(_response(), _request([("A", None), ("B", None), ("T", None)]))
    assert header_length is None
    document = orjson.loads(body)
    assert document["model_name"] == "m" and document["model_version"] == "3" and document["id"] == "abc"
    assert document["outputs"][0] == {"name": "A", "datatype": "FP32", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}
    assert document["outputs"][2]["data"] == ["x", "yé"]


def test_it_mixes_json_and_binary_outputs_as_requested():
    body, header_length = encode_infer_response(_response(), _request([("B", False), ("A", True), ("T", True)]))
    assert header_length is not None
    result = _read(body, header_length)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["B", "A", "T"]
    assert "data" in result.get_output("B") and "data" not in result.get_output("A")
    np.testing.assert_array_equal(result.as_numpy("A"), _response().outputs["A"])
    np.testing.assert_array_equal(result.as_numpy("B"), _response().outputs["B"])
    assert result.as_numpy("T").tolist() == [b"x", "yé".encode()]


def test_it_returns_every_output_in_binary_when_binary_data_output_is_set():
    body, header_length = encode_infer_response(_response(), _request(None, binary_output=True))
    result = _read(body, header_length)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["A", "B", "T", "H"]
    assert all("binary_data_size" in o["parameters"] for o in result.get_response()["outputs"])
    np.testing.assert_array_equal(result.as_numpy("H"), _response().outputs["H"])


def test_it_lets_an_output_override_binary_data_output():
    body, header_length = encode_infer_response(_response(), _request([("A", False)], binary_output=True))
    assert header_length is None and orjson.loads(body)["outputs"][0]["data"] == [0, 1, 2, 3, 4, 5]


def test_it_forces_fp16_and_non_utf8_bytes_to_binary():
    response = _response()
    response.outputs["T"] = np.array([b"\xff\xfe"], dtype=object)
    body, header_length = encode_infer_response(response, _request([("H", False), ("T", False), ("B", False)]))
    result = _read(body, header_length)
    assert result.get_output("H")["parameters"]["binary_data_size"] == 4
    assert result.as_numpy("T").tolist() == [b"\xff\xfe"]
    assert result.get_output("B")["data"] == [1, -2]


def test_it_encodes_bool_and_empty_outputs():
    response = InferenceResponse("m", 1, {"F": np.array([True, False]), "E": np.zeros((0, 4), np.float32)})
    body, _ = encode_infer_response(response)
    document = orjson.loads(body)
    assert document["outputs"][0]["data"] == [True, False]
    assert document["outputs"][1] == {"name": "E", "datatype": "FP32", "shape": [0, 4], "data": []}
    assert "id" not in document


def test_it_round_trips_what_tritonclient_sends(simple_config):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    body, header_length = client_body(
        [("INPUT0", a, "INT32", True), ("INPUT1", a, "INT32", True)], outputs=[("OUTPUT1", True)], request_id="7"
    )
    request = decode_infer_request(body, header_length, simple_config)
    outputs = {"OUTPUT0": request.inputs["INPUT0"] + 1, "OUTPUT1": request.inputs["INPUT1"] * 2}
    result = _read(*encode_infer_response(InferenceResponse("simple", 1, outputs), request))
    assert result.get_response()["id"] == "7"
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 2)


def test_it_passes_response_parameters_through():
    response = InferenceResponse("m", 1, {}, parameters={"sequence_end": True, "n": np.int64(3)})
    document = orjson.loads(encode_infer_response(response)[0])
    assert document["parameters"] == {"sequence_end": True, "n": 3}


def test_it_answers_classification_with_top_k_strings_per_batch_item():
    scores = np.array([[0.1, 0.7, 0.2], [3, 1, 2]], dtype=np.float32)
    request = InferenceRequest("m", {}, requested_outputs=[RequestedOutput("S", {"classification": 2})])
    body, _ = encode_infer_response(InferenceResponse("m", 1, {"S": scores}), request, batched=True)
    output = orjson.loads(body)["outputs"][0]
    assert output["datatype"] == "BYTES" and output["shape"] == [2, 2]
    assert output["data"] == ["0.700000:1", "0.200000:2", "3.000000:0", "2.000000:2"]


def test_it_classifies_an_unbatched_output_over_the_whole_tensor():
    request = InferenceRequest("m", {}, requested_outputs=[RequestedOutput("S", {"classification": 5})])
    scores = np.array([1, 9, 4], dtype=np.int32)
    body, _ = encode_infer_response(InferenceResponse("m", 1, {"S": scores}), request)
    assert orjson.loads(body)["outputs"][0]["data"] == ["9.000000:1", "4.000000:2", "1.000000:0"]
