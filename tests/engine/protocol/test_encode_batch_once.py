"""JSON responses written from a batch's outputs serialized once: the same bytes as each response on its own."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from tritonclient.http import InferResult

from engine.protocol import encode_infer_response
from engine.types import BatchOutputs, InferenceRequest, InferenceResponse, RequestedOutput

BATCH_SIZES = [2, 1, 3]


def _batch() -> BatchOutputs:
    rows = sum(BATCH_SIZES)
    rng = np.random.default_rng(3)
    return BatchOutputs(
        {
            "F32": rng.standard_normal((rows, 3)).astype(np.float32),
            "I64": np.arange(rows, dtype=np.int64) - 3,
            "B": rng.integers(0, 2, (rows, 2, 2)).astype(bool),
            "U8": np.arange(rows * 2, dtype=np.uint8).reshape(rows, 2),
            "EMPTY": np.zeros((rows, 0), dtype=np.float32),
        }
    )


def _responses(batch: BatchOutputs, request_id: str = "") -> list[InferenceResponse]:
    """Each request's slices of the batch, as the dispatcher answers them."""
    responses, start = [], 0
    for size in BATCH_SIZES:
        outputs = {name: array[start : start + size] for name, array in batch.arrays.items()}
        responses.append(InferenceResponse("m", 2, outputs, request_id, rows=(batch, start, start + size)))
        start += size
    return responses


def _document(response: InferenceResponse, names: list[str], request_id: str = "") -> bytes:
    """The response as one JSON document, each output's data flattened (the v2 protocol's JSON form)."""
    document = {"model_name": "m", "model_version": "2"}
    if request_id:
        document["id"] = request_id
    document["outputs"] = [
        {
            "name": name,
            "datatype": {"float32": "FP32", "int64": "INT64", "bool": "BOOL", "uint8": "UINT8"}[
                str(response.outputs[name].dtype)
            ],
            "shape": list(response.outputs[name].shape),
            "data": np.ascontiguousarray(response.outputs[name]).reshape(-1),
        }
        for name in names
    ]
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize("request_id", ["", 'id "quoted"'])
def test_it_answers_every_request_of_a_batch_with_the_bytes_of_its_own_document(request_id: str) -> None:
    batch = _batch()
    for response in _responses(batch, request_id):
        request = InferenceRequest("m", {}, id=request_id)
        body, header_length = encode_infer_response(response, request, batched=True)
        assert header_length is None
        assert body == _document(response, list(batch.arrays), request_id)


def test_it_reads_back_with_tritonclient_as_each_requests_rows() -> None:
    batch = _batch()
    start = 0
    for response, size in zip(_responses(batch), BATCH_SIZES, strict=True):
        body, _ = encode_infer_response(response, InferenceRequest("m", {}), batched=True)
        result = InferResult.from_response_body(body, header_length=None)
        for name, array in batch.arrays.items():
            np.testing.assert_array_equal(result.as_numpy(name), array[start : start + size])
        start += size


def test_it_serializes_each_batch_output_once_for_all_requests() -> None:
    batch = _batch()
    for response in _responses(batch):
        encode_infer_response(response, InferenceRequest("m", {}), batched=True)
    serialized = {key for key in batch.encoded if isinstance(key, str)}
    assert serialized == set(batch.arrays)
    assert all(len(batch.encoded[name][2]) == sum(BATCH_SIZES) for name in serialized - {"EMPTY"})  # one per row


def test_it_keeps_the_requested_order_and_leaves_out_what_was_not_asked_for() -> None:
    batch = _batch()
    response = _responses(batch)[2]
    request = InferenceRequest("m", {}, requested_outputs=[RequestedOutput("U8"), RequestedOutput("F32")])
    body, _ = encode_infer_response(response, request, batched=True)
    assert body == _document(response, ["U8", "F32"])


@pytest.mark.parametrize(
    ("requested", "parameters"),
    [
        ([RequestedOutput("F32", {"binary_data": True})], {}),  # one output in binary
        (None, {"binary_data_output": True}),  # every output in binary
    ],
)
def test_it_answers_binary_requests_of_a_batch_through_the_binary_extension(requested, parameters) -> None:
    batch = _batch()
    response = _responses(batch)[0]
    request = InferenceRequest("m", {}, requested_outputs=requested, parameters=parameters)
    body, header_length = encode_infer_response(response, request, batched=True)
    assert header_length is not None
    result = InferResult.from_response_body(body, header_length=header_length)
    np.testing.assert_array_equal(result.as_numpy("F32"), batch.arrays["F32"][:2])
    assert "data" not in result.get_output("F32")


def test_it_writes_text_and_half_floats_of_a_batch_as_alone() -> None:
    batch = BatchOutputs(
        {
            "T": np.array([b"a", b"b\xff", "c\u00e9".encode()], dtype=object),  # the second is not UTF-8
            "H": np.array([[1.5], [2.0], [0.25]], dtype=np.float16),
        }
    )
    response = InferenceResponse("m", 1, {n: a[1:3] for n, a in batch.arrays.items()}, rows=(batch, 1, 3))
    body, header_length = encode_infer_response(response, InferenceRequest("m", {}), batched=True)
    result = InferResult.from_response_body(body, header_length=header_length)
    assert result.as_numpy("T").tolist() == [b"b\xff", "c\u00e9".encode()]  # binary: not valid UTF-8
    np.testing.assert_array_equal(result.as_numpy("H"), batch.arrays["H"][1:3])  # FP16 is always binary


def test_it_writes_a_lone_requests_outputs_as_one_document() -> None:
    outputs = {"S": np.array(7, dtype=np.int32), "E": np.zeros((1, 0), dtype=np.float32)}
    response = InferenceResponse("m", 2, outputs)
    body, header_length = encode_infer_response(response, InferenceRequest("m", {}))
    assert header_length is None
    assert orjson.loads(body)["outputs"] == [
        {"name": "S", "datatype": "INT32", "shape": [], "data": [7]},
        {"name": "E", "datatype": "FP32", "shape": [1, 0], "data": []},
    ]
