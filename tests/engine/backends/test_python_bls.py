"""BLS: model.py calling other models of the server with InferenceRequest.exec() and async_exec()."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.engine.backends.python_client import A, B, int32_pair, tensor

pytestmark = pytest.mark.server


@pytest.mark.parametrize("target", ["simple", "add_sub"])
@pytest.mark.parametrize("model", ["bls_sync", "bls_in_process"])
def test_it_calls_an_onnx_model_and_a_python_model_from_execute(python_url, model, target):
    client = httpclient.InferenceServerClient(python_url)
    result = client.infer(model, int32_pair(), parameters={"target": target})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def test_it_iterates_the_responses_of_a_decoupled_call(python_url):
    client = httpclient.InferenceServerClient(python_url)
    result = client.infer("bls_sync", int32_pair(), parameters={"target": "add_sub", "decoupled": True})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)


def test_it_hands_the_error_of_a_failed_call_back_to_the_model(python_url):
    client = httpclient.InferenceServerClient(python_url)
    with pytest.raises(InferenceServerException, match="Request for unknown model: 'nowhere' is not found"):
        client.infer("bls_sync", int32_pair(), parameters={"target": "nowhere"})
    assert client.infer("bls_sync", int32_pair()).as_numpy("OUTPUT0") is not None


def test_it_awaits_calls_to_two_models_at_once_from_async_execute(python_url):
    client = httpclient.InferenceServerClient(python_url)
    result = client.infer("bls_async", int32_pair())
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * (A + B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * (A - B))


def test_it_counts_bls_calls_in_the_targets_statistics(python_url):
    client = httpclient.InferenceServerClient(python_url)
    before = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["success"]["count"]
    client.infer("bls_sync", int32_pair(), parameters={"target": "add_sub"})
    after = client.get_inference_statistics("add_sub")["model_stats"][0]["inference_stats"]["success"]["count"]
    assert int(after) == int(before) + 1


async def test_it_gives_async_execute_a_batch_of_several_requests(python_url):
    # max_batch_size 4 and a long queue delay: four requests at once make one full batch, one execute call
    async with aioclient.InferenceServerClient(python_url) as client:
        results = await asyncio.gather(
            *(client.infer("async_batch", [tensor("X", np.array([[i]], np.int32), "INT32")]) for i in range(4))
        )
    assert [int(r.as_numpy("COUNT")[0, 0]) for r in results] == [4, 4, 4, 4]
