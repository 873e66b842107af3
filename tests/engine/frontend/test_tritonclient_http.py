"""The real server under uvicorn, driven by tritonclient.http (sync): inference, metadata, stats, repository."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.v2_checks import (
    assert_guard_answers,
    infer_json,
    raw_request,
    simple_inputs,
    simple_json_inputs,
)

pytestmark = pytest.mark.server

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 3, dtype=np.int32)


@pytest.fixture
def client(uvicorn_server_url):
    with httpclient.InferenceServerClient(uvicorn_server_url) as client:
        yield client


def test_it_reports_server_and_model_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata["name"] == "infera"
    assert {"binary_tensor_data", "model_repository", "statistics", "model_configuration"} <= set(
        metadata["extensions"]
    )
    model = client.get_model_metadata("simple")
    assert model["name"] == "simple" and model["versions"] == ["1"] and model["platform"] == "onnxruntime_onnx"
    assert model["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    assert client.get_model_metadata("simple", "1") == model
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    assert not client.is_model_ready("broken") and not client.is_model_ready("nope")
    config = client.get_model_config("simple")
    assert config["max_batch_size"] == 8 and config["input"][0]["dims"] == [16]


def test_it_lists_every_extension_it_implements_and_not_cuda_shared_memory(client):
    extensions = set(client.get_server_metadata()["extensions"])
    assert {"sequence", "system_shared_memory", "trace", "logging", "classification", "parameters"} <= extensions
    assert "cuda_shared_memory" not in extensions  # a CUDA region's registration is refused


def test_it_mixes_json_and_binary_inputs_and_outputs_in_one_request(client):
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    result = client.infer("simple", simple_inputs(A, B, (True, False)), outputs=outputs, request_id="mix-1")
    assert result.get_response()["id"] == "mix-1"
    assert "data" not in result.get_output("OUTPUT0") and "data" in result.get_output("OUTPUT1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_it_returns_every_output_when_none_are_requested(client):
    result = client.infer("simple", simple_inputs(A, B, (False, True)))
    names = [o["name"] for o in result.get_response()["outputs"]]
    assert names == ["OUTPUT0", "OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_it_returns_only_the_requested_outputs(client):
    batch = np.arange(48, dtype=np.int32).reshape(3, 16)
    result = client.infer(
        "simple", simple_inputs(batch, batch, (True, True)), outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
    )
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((3, 16), np.int32))


@pytest.mark.parametrize("binary", [True, False])
def test_it_serves_bytes_tensors(client, binary):
    a = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    b = np.array([[b"1"] * 16], dtype=object)
    inputs = []
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        infer_input = httpclient.InferInput(name, [1, 16], "BYTES")
        infer_input.set_data_from_numpy(array, binary_data=binary)
        inputs.append(infer_input)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple_string", inputs, outputs=outputs)
    sums = result.as_numpy("OUTPUT0").reshape(-1).tolist()
    expected = [str(i + 1) for i in range(16)]
    assert [s.decode() if isinstance(s, bytes) else s for s in sums] == expected


def test_it_serves_fp16_through_binary_data(client):
    x = np.array([[0.5, 1.5, -2, 3.25], [1, 2, 3, 4]], dtype=np.float16)
    infer_input = httpclient.InferInput("INPUT0", [2, 4], "FP16")
    infer_input.set_data_from_numpy(x)
    result = client.infer("fp16_double", [infer_input], outputs=[httpclient.InferRequestedOutput("OUTPUT0", False)])
    assert result.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 16
    output = result.as_numpy("OUTPUT0")
    assert output.dtype == np.float16
    np.testing.assert_array_equal(output, x * 2)


def test_it_refuses_fp16_sent_as_json(client, uvicorn_server_url):
    infer_input = httpclient.InferInput("INPUT0", [1, 4], "FP16")
    infer_input.set_data_from_numpy(np.ones((1, 4), np.float16), binary_data=False)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("fp16_double", [infer_input])
    assert caught.value.status() == "400"
    assert "input 'INPUT0' of datatype FP16 must be sent as binary data" in caught.value.message()
    assert_guard_answers(uvicorn_server_url)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_it_decompresses_requests_and_compresses_responses(client, algorithm):
    result = client.infer(
        "simple",
        simple_inputs(A, B, (True, False)),
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_it_marks_a_compressed_response(uvicorn_server_url, algorithm):
    answer = raw_request(
        uvicorn_server_url,
        "POST",
        "/v2/models/simple/infer?debug=1",
        infer_json(simple_json_inputs()),
        {"Accept-Encoding": algorithm},
    )
    assert answer.status == 200 and answer.headers["content-encoding"] == algorithm


def test_it_counts_what_was_sent_in_the_statistics(client):
    def simple_stats() -> dict:
        return client.get_inference_statistics("simple")["model_stats"][0]

    before = simple_stats()
    for batch in (1, 1, 2):
        data = np.zeros((batch, 16), np.int32)
        client.infer("simple", simple_inputs(data, data))
    after = simple_stats()
    assert after["name"] == "simple" and after["version"] == "1"
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert after["inference_count"] - before["inference_count"] == 4
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["last_inference"] >= before["last_inference"]
    every = client.get_inference_statistics()["model_stats"]
    assert {"simple", "guard", "fp16_double"} <= {s["name"] for s in every}
    assert client.get_inference_statistics("simple", "1")["model_stats"][0]["inference_count"] >= 4


def test_it_indexes_the_repository_with_states_and_reasons(client, uvicorn_server_url):
    index = {row["name"]: row for row in client.get_model_repository_index()}
    assert index["simple"]["state"] == "READY" and index["simple"]["version"] == "1"
    assert index["broken"]["state"] == "UNAVAILABLE" and index["broken"]["reason"]
    ready = raw_request(uvicorn_server_url, "POST", "/v2/repository/index", b'{"ready": true}')
    assert "broken" not in {row["name"] for row in json.loads(ready.body)}


def test_it_reloads_a_model_with_a_config_override_and_back(client):
    client.load_model("resizable", config=json.dumps({"max_batch_size": "4"}))
    assert client.get_model_config("resizable")["max_batch_size"] == 4
    batch = np.zeros((5, 16), np.int32)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("resizable", simple_inputs(batch, batch))
    assert caught.value.status() == "400"
    assert "batch size 5, above max_batch_size 4 of model 'resizable'" in caught.value.message()
    client.load_model("resizable")
    assert client.get_model_config("resizable")["max_batch_size"] == 8
    result = client.infer("resizable", simple_inputs(batch, batch))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), batch)


def test_it_unloads_and_loads_a_model_again(client):
    client.unload_model("resizable")
    assert not client.is_model_ready("resizable")
    with pytest.raises(InferenceServerException) as caught:
        client.infer("resizable", simple_inputs(A, B))
    assert caught.value.status() == "400"
    assert "Request for unknown model: 'resizable'" in caught.value.message()
    assert client.is_model_ready("simple")
    client.load_model("resizable")
    assert client.is_model_ready("resizable")


def test_it_fails_to_load_an_unknown_model(client, uvicorn_server_url):
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("ghost")
    assert caught.value.status() == "400"
    assert caught.value.message().startswith("failed to load 'ghost'")
    assert_guard_answers(uvicorn_server_url)


def test_it_loads_a_model_from_sent_files(client, server_repository: Path):
    onnx_bytes = (server_repository / "simple" / "1" / "model.onnx").read_bytes()
    config = client.get_model_config("simple")
    config["name"] = "uploaded"
    client.load_model("uploaded", config=json.dumps(config), files={"file:1/model.onnx": onnx_bytes})
    try:
        result = client.infer("uploaded", simple_inputs(A, B))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
    finally:
        client.unload_model("uploaded")
