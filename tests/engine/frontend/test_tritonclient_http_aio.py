"""The real server under uvicorn, driven by tritonclient.http.aio (aiohttp)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aioclient
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.v2_checks import check_guard_output, guard_inputs, simple_inputs

pytestmark = pytest.mark.server

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 5, dtype=np.int32)


@pytest.fixture
async def client(uvicorn_server_url):
    async with aioclient.InferenceServerClient(uvicorn_server_url) as client:
        yield client


async def test_it_reports_health_and_metadata(client):
    assert await client.is_server_live() and await client.is_server_ready()
    assert (await client.get_server_metadata())["name"] == "infera"
    assert (await client.get_model_metadata("simple"))["outputs"][1]["name"] == "OUTPUT1"
    assert (await client.get_model_config("simple"))["max_batch_size"] == 8
    assert await client.is_model_ready("simple")


async def test_it_mixes_json_and_binary_in_concurrent_requests(client):
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", True), httpclient.InferRequestedOutput("OUTPUT1", False)]
    requests = [
        client.infer("simple", simple_inputs(A * i, B, (i % 2 == 0, i % 2 == 1)), outputs=outputs) for i in range(8)
    ]
    results = await asyncio.gather(*requests)
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A * i + B)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A * i - B)


async def test_it_serves_bytes_and_fp16(client):
    text = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    inputs = []
    for name, array in (("INPUT0", text), ("INPUT1", text)):
        infer_input = aioclient.InferInput(name, [1, 16], "BYTES")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    result = await client.infer("simple_string", inputs)
    assert result.as_numpy("OUTPUT0").reshape(-1).tolist() == [str(2 * i).encode() for i in range(16)]
    half = np.array([[1, 2, 3, 4]], dtype=np.float16)
    fp16 = aioclient.InferInput("INPUT0", [1, 4], "FP16")
    fp16.set_data_from_numpy(half)
    np.testing.assert_array_equal((await client.infer("fp16_double", [fp16])).as_numpy("OUTPUT0"), half * 2)


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
async def test_it_compresses_both_ways(client, algorithm):
    result = await client.infer(
        "simple",
        simple_inputs(A, B),
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


async def test_it_counts_requests_in_the_statistics(client):
    async def success_count() -> int:
        stats = await client.get_inference_statistics("guard")
        return stats["model_stats"][0]["inference_stats"]["success"]["count"]

    before = await success_count()
    for _ in range(2):
        check_guard_output((await client.infer("guard", guard_inputs())).as_numpy("OUTPUT0"))
    assert await success_count() - before == 2


async def test_it_reloads_with_an_override_and_reports_errors_with_their_status(client):
    await client.load_model("resizable", config=json.dumps({"max_batch_size": "2"}))
    try:
        assert (await client.get_model_config("resizable"))["max_batch_size"] == 2
        batch = np.zeros((3, 16), np.int32)
        with pytest.raises(InferenceServerException) as caught:
            await client.infer("resizable", simple_inputs(batch, batch))
        assert caught.value.status() == "400" and "above max_batch_size 2" in caught.value.message()
    finally:
        await client.load_model("resizable")
    with pytest.raises(InferenceServerException) as unknown:
        await client.get_model_metadata("nope")
    assert unknown.value.status() == "400"
    assert unknown.value.message() == "Request for unknown model: 'nope' is not found"
    with pytest.raises(InferenceServerException) as failed:
        await client.load_model("ghost")
    assert failed.value.message().startswith("failed to load 'ghost'")
    check_guard_output((await client.infer("guard", guard_inputs())).as_numpy("OUTPUT0"))
