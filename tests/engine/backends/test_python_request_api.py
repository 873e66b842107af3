"""What a model.py is given: Triton's initialize args, request parameters and ids, auto-completed configs, BF16."""

from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.engine.backends.python_client import tensor

pytestmark = pytest.mark.server


def echoed(client: httpclient.InferenceServerClient, **options) -> dict:
    result = client.infer("echo_args", [tensor("X", np.ones((1, 1), np.float32), "FP32")], **options)
    return json.loads(result.as_numpy("TEXT")[0, 0])


def test_it_passes_tritons_initialize_args(python_url):
    args = echoed(httpclient.InferenceServerClient(python_url))["args"]
    assert args["model_instance_name"] == "echo_args_0_0"
    assert (args["model_name"], args["model_version"], args["model_instance_kind"]) == ("echo_args", "1", "CPU")
    assert args["model_instance_device_id"] == "0" and args["model_repository"].endswith("/echo_args")
    assert json.loads(args["model_config"])["output"][0]["name"] == "TEXT"


def test_it_shows_the_request_its_parameters_id_and_requested_outputs(python_url):
    client = httpclient.InferenceServerClient(python_url)
    seen = echoed(client, parameters={"temperature": 3, "mode": "fast", "strict": True}, request_id="abc")
    assert seen["parameters"] == {"temperature": 3, "mode": "fast", "strict": True}
    assert (seen["request_id"], seen["requested"]) == ("abc", ["TEXT"])


def test_it_serves_a_model_whose_config_comes_from_auto_complete_config(python_url):
    client = httpclient.InferenceServerClient(python_url)
    config = client.get_model_config("auto_complete")
    assert config["max_batch_size"] == 4 and "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("X", "TYPE_FP32", [3])]
    result = client.infer("auto_complete", [tensor("X", np.ones((2, 3), np.float32), "FP32")])
    np.testing.assert_array_equal(result.as_numpy("Y"), np.full((2, 3), 2, np.float32))


def test_it_carries_bf16_through_dlpack_into_torch_and_back(python_url):
    client = httpclient.InferenceServerClient(python_url)
    x = np.array([[1.0, -2.5, 3.0, 1024.0]], dtype=ml_dtypes.bfloat16)
    result = client.infer("bf16_double", [tensor("X", x, "BF16")])
    np.testing.assert_array_equal(result.as_numpy("Y").astype(np.float32), x.astype(np.float32) * 2)
