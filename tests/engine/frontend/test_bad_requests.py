"""Every bad request gets a clear status and message from the real server, and other models keep serving."""

from __future__ import annotations

import gzip
import json
import struct

import pytest

from tests.engine.frontend.server_process import SERVER_BODY_LIMIT
from tests.engine.frontend.v2_checks import assert_guard_answers, infer_json, raw_request, simple_json_inputs

pytestmark = pytest.mark.server

INFER = "/v2/models/simple/infer"


def _changed(index: int, **changes) -> bytes:
    inputs = simple_json_inputs()
    inputs[index].update(changes)
    return infer_json(inputs)


def _bytes_with_bad_length() -> tuple[bytes, dict[str, str]]:
    payload = (struct.pack("<I", 1) + b"1") * 15 + struct.pack("<I", 500) + b"2"
    inputs = [
        {"name": "INPUT0", "datatype": "BYTES", "shape": [1, 16], "parameters": {"binary_data_size": len(payload)}}
    ]
    header = json.dumps({"inputs": inputs}).encode()
    return header + payload, {"Inference-Header-Content-Length": str(len(header))}


BYTES_BODY, BYTES_HEADERS = _bytes_with_bad_length()

CASES = [
    # (id, method, path, body, headers, status, message fragment)
    ("malformed json", "POST", INFER, b'{"inputs": [', {}, 400, "malformed JSON"),
    ("not an object", "POST", INFER, b"[1, 2]", {}, 400, "must be a JSON object"),
    (
        "unknown model",
        "POST",
        "/v2/models/nope/infer",
        infer_json(simple_json_inputs()),
        {},
        400,
        "Request for unknown model: 'nope' is not found",
    ),
    (
        "unknown version",
        "POST",
        "/v2/models/simple/versions/9/infer",
        infer_json(simple_json_inputs()),
        {},
        400,
        "Request for unknown model: 'simple' version 9 is not found",
    ),
    (
        "non-numeric version",
        "POST",
        "/v2/models/simple/versions/one/infer",
        infer_json(simple_json_inputs()),
        {},
        400,
        "model version 'one' is not a positive integer",
    ),
    (
        "missing input",
        "POST",
        INFER,
        infer_json(simple_json_inputs()[:1]),
        {},
        400,
        "model 'simple' is missing required input(s) 'INPUT1'",
    ),
    (
        "extra input",
        "POST",
        INFER,
        infer_json([*simple_json_inputs(), {"name": "INPUT2", "datatype": "INT32", "shape": [1], "data": [1]}]),
        {},
        400,
        "unexpected inference input 'INPUT2' for model 'simple'",
    ),
    (
        "wrong datatype",
        "POST",
        INFER,
        _changed(0, datatype="FP32"),
        {},
        400,
        "input 'INPUT0' expects datatype INT32, got FP32",
    ),
    (
        "wrong shape",
        "POST",
        INFER,
        _changed(0, shape=[2, 15], data=[0] * 30),
        {},
        400,
        "input 'INPUT0' expects shape [-1, 16], got [2, 15]",
    ),
    (
        "data length",
        "POST",
        INFER,
        _changed(0, data=[0] * 15),
        {},
        400,
        "input 'INPUT0' has 15 values in 'data' but shape [1, 16] needs 16",
    ),
    (
        "batch above max",
        "POST",
        INFER,
        infer_json(simple_json_inputs(batch=9)),
        {},
        400,
        "input 'INPUT0' has batch size 9, above max_batch_size 8 of model 'simple'",
    ),
    (
        "header length beyond body",
        "POST",
        INFER,
        infer_json(simple_json_inputs()),
        {"Inference-Header-Content-Length": "100000"},
        400,
        "Inference-Header-Content-Length 100000 is beyond the body",
    ),
    (
        "header length not a number",
        "POST",
        INFER,
        infer_json(simple_json_inputs()),
        {"Inference-Header-Content-Length": "ten"},
        400,
        "is not a byte count",
    ),
    (
        "bytes element beyond buffer",
        "POST",
        "/v2/models/simple_string/infer",
        BYTES_BODY,
        BYTES_HEADERS,
        400,
        "BYTES element of 500 bytes",
    ),
    (
        "unsupported content-encoding",
        "POST",
        INFER,
        infer_json(simple_json_inputs()),
        {"Content-Encoding": "br"},
        400,
        "unsupported Content-Encoding 'br'",
    ),
    (
        "corrupt gzip",
        "POST",
        INFER,
        gzip.compress(infer_json(simple_json_inputs()))[:-20],
        {"Content-Encoding": "gzip"},
        400,
        "not valid gzip data",
    ),
    (
        "oversized body",
        "POST",
        INFER,
        b" " * (SERVER_BODY_LIMIT + 1),
        {},
        413,
        f"request body exceeds the limit of {SERVER_BODY_LIMIT} bytes",
    ),
    ("unknown path", "GET", "/v2/models/simple/explain", b"", {}, 404, "Not Found"),
    ("wrong method", "DELETE", "/v2/models/simple", b"", {}, 405, "method DELETE is not allowed"),
    (
        "backend failure",
        "POST",
        "/v2/models/failing/infer",
        infer_json([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]),
        {},
        500,
        "deliberate failure in execute",
    ),
    (
        "model not ready",
        "POST",
        "/v2/models/broken/infer",
        infer_json([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]),
        {},
        503,
        "model 'broken' has no version ready",
    ),
    (
        "version not ready",
        "POST",
        "/v2/models/broken/versions/1/infer",
        infer_json([{"name": "INPUT0", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}]),
        {},
        503,
        "deliberate failure in initialize",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_it_answers_a_bad_request_clearly_and_keeps_serving(
    uvicorn_server_url, method, path, body, headers, status, message
):
    answer = raw_request(uvicorn_server_url, method, path, body, headers)
    assert answer.status == status, answer.body
    assert message in answer.error()
    if status == 503:
        assert answer.headers["retry-after"] == "1"
    assert_guard_answers(uvicorn_server_url)


def test_it_tolerates_query_parameters(uvicorn_server_url):
    answer = raw_request(uvicorn_server_url, "GET", "/v2/models/simple/config?verbose=true&x=1")
    assert answer.status == 200 and json.loads(answer.body)["name"] == "simple"
