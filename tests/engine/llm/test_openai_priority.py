"""Request priority observed on a real server under a saturated scheduler (the tiny Llama with max_num_seqs 1): low
priority requests queued first, then a high one, which finishes before every one of them; through the `openai`
client's extra_body (vLLM's `priority`) and through Triton's generate (`sampling_parameters`). The model's first
step is held until every request has reached the engine, so the queue, not timing, decides the order."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable

import openai
import pytest
import pytest_asyncio

from tests.engine.llm.served import WAIT_S, serving, tiny_repository
from tests.engine.llm.test_llm_backend import CONFIG

pytestmark = pytest.mark.asyncio(loop_scope="module")

SATURATED = CONFIG + 'parameters { key: "max_num_seqs" value: { string_value: "1" } }\n'
LOW, HIGH = 5, -1


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder, tmp_path_factory):
    repo = tiny_repository(tmp_path_factory.mktemp("priority-repo"), tiny_llama_folder, SATURATED)
    async with serving(repo) as served:
        yield served


async def finishing_order(served, monkeypatch, ask: Callable[[int], Awaitable[object]]) -> list[str]:
    """Send low0..low3 then high, each once the previous one reached the engine, with the model's first step held
    until all five are there; the names in the order their answers came back."""
    backend = served.server.get_model("tiny").instances[0].backend
    engine, runner = backend.engine, backend.runner
    loop = asyncio.get_running_loop()
    arrived: asyncio.Queue[int] = asyncio.Queue()
    release = threading.Event()
    real_submit, real_execute = engine.submit, runner.execute

    def submit(request):
        request_id = real_submit(request)
        loop.call_soon_threadsafe(arrived.put_nowait, request.priority)
        return request_id

    def execute(plan):
        release.wait(WAIT_S)
        return real_execute(plan)

    monkeypatch.setattr(engine, "submit", submit)
    monkeypatch.setattr(runner, "execute", execute)
    order: list[str] = []

    async def send(name: str, priority: int) -> None:
        await ask(priority)
        order.append(name)

    tasks = []
    async with asyncio.timeout(WAIT_S):
        for name, priority in [(f"low{i}", LOW) for i in range(4)] + [("high", HIGH)]:
            tasks.append(asyncio.create_task(send(name, priority)))
            assert await arrived.get() == priority
        release.set()
        await asyncio.gather(*tasks)
    return order


async def test_a_high_priority_completion_finishes_before_low_ones_queued_earlier(served, monkeypatch):
    client = openai.AsyncOpenAI(base_url=f"{served.client.base_url}/v1", api_key="unused", max_retries=0)

    async def ask(priority: int) -> object:
        return await client.completions.create(
            model="tiny", prompt="a paged cache keeps", max_tokens=4, temperature=0, extra_body={"priority": priority}
        )

    try:
        order = await finishing_order(served, monkeypatch, ask)
    finally:
        await client.close()
    assert order[0] == "high", order
    assert sorted(order[1:]) == ["low0", "low1", "low2", "low3"]


async def test_a_high_priority_generate_finishes_before_low_ones_queued_earlier(served, monkeypatch):
    async def ask(priority: int) -> object:
        body = {"text_input": "a paged cache keeps", "max_tokens": 4}
        body["sampling_parameters"] = json.dumps({"priority": priority})
        answer = await served.generate("tiny", body)
        assert answer.status_code == 200, answer.text
        return answer

    order = await finishing_order(served, monkeypatch, ask)
    assert order[0] == "high", order


async def test_a_priority_that_is_not_a_whole_number_is_refused_naming_it(served):
    answer = await served.client.post(
        "/v1/completions", json={"model": "tiny", "prompt": "a paged cache", "max_tokens": 2, "priority": 1.5}
    )
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "priority"
    refused = await served.generate(
        "tiny", {"text_input": "a paged cache", "sampling_parameters": json.dumps({"priority": "high"})}
    )
    assert refused.status_code == 400 and "priority" in refused.json()["error"]
