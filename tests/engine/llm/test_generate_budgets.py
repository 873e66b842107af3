"""Token budgets on Triton's generate, generate_stream and gRPC streams (the same gate as /v1, so neither /v2 nor
gRPC is a way round a budget): a 429 with Retry-After over tokens per minute, max_tokens above the ceiling a 400
and the ceiling held when none is named, a stream's slot given back when it ends, a gRPC stream's request over the
budget answered with its error. The gate's clock stands still."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import pytest_asyncio
import tritonclient.grpc.aio as grpcclient

from engine.frontend.grpc_server import GrpcFrontEnd
from engine.llm.budgets import BudgetGate
from engine.settings import GrpcSettings
from tests.engine.llm.served import WAIT_S, serving, tiny_repository
from tests.engine.llm.test_llm_backend import CONFIG
from tests.engine.llm.test_openai_budgets import authenticate

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder, tmp_path_factory):
    repo = tiny_repository(tmp_path_factory.mktemp("generate-budgets-repo"), tiny_llama_folder, CONFIG)
    gate = BudgetGate(clock=lambda: 6000.0)
    async with serving(repo, authenticate=authenticate, budgets=gate) as served:
        served.gate = gate
        yield served


async def generate(served, caller: str, body: dict, stream: bool = False):
    path = f"/v2/models/tiny/generate{'_stream' if stream else ''}"
    return await served.client.post(path, json=body, headers={"Authorization": f"Bearer {caller}"})


async def test_generate_over_the_tokens_per_minute_gets_429_with_retry_after(served):
    first = await generate(served, "spent", {"text_input": "a paged cache keeps", "max_tokens": 5})
    assert first.status_code == 200, first.text
    refused = await generate(served, "spent", {"text_input": "a paged cache keeps", "max_tokens": 1})
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert "5 tokens per minute" in refused.json()["error"]


async def test_generate_is_held_to_the_max_tokens_ceiling(served):
    refused = await generate(served, "capped", {"text_input": "a paged cache keeps", "max_tokens": 4})
    assert refused.status_code == 400 and "at most 3" in refused.json()["error"]
    named_in_sampling = {"text_input": "a paged cache keeps", "sampling_parameters": '{"max_tokens": 9}'}
    assert (await generate(served, "capped", named_in_sampling)).status_code == 400
    held = await generate(served, "capped", {"text_input": "a paged cache keeps"})
    assert held.status_code == 200 and held.json()["completion_tokens"] <= 3


async def test_a_finished_stream_gives_its_slot_back(served):
    for _ in range(2):  # one concurrent request at most: the second runs only if the first gave its slot back
        answer = await generate(
            served, "single", {"text_input": "a paged cache keeps", "max_tokens": 2, "stream": True}, stream=True
        )
        assert answer.status_code == 200 and answer.text.count("data:") >= 2


async def test_a_grpc_stream_request_over_the_budget_is_answered_with_its_error(served):
    front_end = GrpcFrontEnd(
        served.server, GrpcSettings(port=0, shutdown_grace_seconds=0), authenticate=authenticate, budgets=served.gate
    )
    await front_end.start()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")

    async def requests():
        for index in range(2):  # each reserves its max_tokens 5: the minute's 5 are gone after the first
            prompt = grpcclient.InferInput("text_input", [1], "BYTES")
            prompt.set_data_from_numpy(np.array([b"a paged cache keeps"], dtype=np.object_))
            limit = grpcclient.InferInput("max_tokens", [1], "INT32")
            limit.set_data_from_numpy(np.array([5], dtype=np.int32))
            yield {"model_name": "tiny", "inputs": [prompt, limit], "request_id": str(index)}

    answers, errors = 0, []
    try:
        async with asyncio.timeout(WAIT_S):
            async for _result, error in client.stream_infer(requests(), headers={"authorization": "Bearer streamer"}):
                if error is not None:
                    errors.append(str(error))
                else:
                    answers += 1
    finally:
        await client.close()
        await front_end.stop()
    assert answers >= 1
    assert len(errors) == 1 and "5 tokens per minute" in errors[0], errors


async def test_generate_by_a_caller_without_budgets_is_counted_as_its_usage(served):
    answer = await generate(served, "free", {"text_input": "a paged cache keeps", "max_tokens": 2})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    usage = served.gate.ledger.usage
    assert usage[("free", "prompt")] == body["prompt_tokens"] > 0
    assert usage[("free", "completion")] == body["completion_tokens"] > 0
    assert [(b.user, b.token_id) for b in served.gate.ledger.take_minutes() if b.user == "free"] == [("free", 14)]
