"""Token budgets on Triton's generate and generate_stream (the same gate as /v1, so /v2 is no way round a budget):
a 429 with Retry-After over tokens per minute, max_tokens above the ceiling a 400 and the ceiling held when none is
named, a stream's slot given back when it ends. The gate's clock stands still."""

from __future__ import annotations

import pytest
import pytest_asyncio

from engine.llm.budgets import BudgetGate
from tests.engine.llm.served import serving, tiny_repository
from tests.engine.llm.test_llm_backend import CONFIG
from tests.engine.llm.test_openai_budgets import authenticate

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder, tmp_path_factory):
    repo = tiny_repository(tmp_path_factory.mktemp("generate-budgets-repo"), tiny_llama_folder, CONFIG)
    async with serving(repo, authenticate=authenticate, budgets=BudgetGate(clock=lambda: 6000.0)) as served:
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
