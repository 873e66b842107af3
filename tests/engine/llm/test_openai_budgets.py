"""Token budgets on /v1 with the `openai` client against a real server over the tiny Llama: over a budget a 429 in
OpenAI's rate-limit shape with Retry-After before any work is queued, a second concurrent request refused while the
first runs, a max_tokens above the ceiling refused with 400 and the ceiling used when none is asked, usage counted
per user. The gate's clock stands still, so the minute never turns during a test."""

from __future__ import annotations

import asyncio
import threading

import openai
import pytest
import pytest_asyncio

from engine.errors import Unauthorized
from engine.llm.budgets import Budget, BudgetGate
from engine.serving.admission import Principal
from tests.engine.llm.served import WAIT_S, serving, tiny_repository
from tests.engine.llm.test_llm_backend import CONFIG

pytestmark = pytest.mark.asyncio(loop_scope="module")

CALLERS = {
    "spent": Principal("spent", user_id=1, token_id=11, budgets=(Budget("token:11", tokens_per_minute=5),)),
    "single": Principal("single", user_id=2, token_id=12, budgets=(Budget("user:2", concurrent_streams=1),)),
    "capped": Principal("capped", user_id=3, token_id=13, budgets=(Budget("token:13", max_tokens=3),)),
    "free": Principal("free", user_id=4, token_id=14),
    "streamer": Principal("streamer", user_id=5, token_id=15, budgets=(Budget("token:15", tokens_per_minute=5),)),
}


async def authenticate(scope) -> Principal:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return CALLERS[value.decode().removeprefix("Bearer ")]
    raise Unauthorized("no key")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tiny_llama_folder, tmp_path_factory):
    repo = tiny_repository(tmp_path_factory.mktemp("budgets-repo"), tiny_llama_folder, CONFIG)
    gate = BudgetGate(clock=lambda: 6000.0)  # the start of a minute, for every request of the module
    async with serving(repo, authenticate=authenticate, budgets=gate) as served:
        served.gate = gate
        yield served


def client_of(served, caller: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{served.client.base_url}/v1", api_key=caller, max_retries=0)


async def complete(client: openai.AsyncOpenAI, **options):
    return await client.completions.create(model="tiny", prompt="a paged cache keeps", temperature=0, **options)


def assert_spent_its_minute(refused: openai.RateLimitError) -> None:
    """A 429 in OpenAI's rate-limit shape with Retry-After, for a caller past its 5 tokens per minute."""
    response = refused.response
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) >= 1
    error = response.json()["error"]
    assert error["type"] == "tokens" and error["code"] == "rate_limit_exceeded" and error["param"] is None
    assert "5 tokens per minute" in error["message"]


async def test_a_caller_over_its_tokens_per_minute_gets_429_with_retry_after(served):
    client = client_of(served, "spent")
    try:
        await complete(client, max_tokens=5)  # reserves 5 of 5, then counts its prompt and completion
        with pytest.raises(openai.RateLimitError) as refused:
            await complete(client, max_tokens=1)
    finally:
        await client.close()
    assert_spent_its_minute(refused.value)


async def test_a_second_concurrent_request_is_refused_while_the_first_runs(served, monkeypatch):
    backend = served.server.get_model("tiny").instances[0].backend
    loop = asyncio.get_running_loop()
    reached = asyncio.Event()
    release = threading.Event()
    real_submit, real_execute = backend.engine.submit, backend.runner.execute

    def submit(request):
        request_id = real_submit(request)
        loop.call_soon_threadsafe(reached.set)
        return request_id

    def execute(plan):
        release.wait(WAIT_S)
        return real_execute(plan)

    monkeypatch.setattr(backend.engine, "submit", submit)
    monkeypatch.setattr(backend.runner, "execute", execute)
    client = client_of(served, "single")
    try:
        async with asyncio.timeout(WAIT_S):
            first = asyncio.create_task(complete(client, max_tokens=2))
            await reached.wait()
            with pytest.raises(openai.RateLimitError) as refused:
                await complete(client, max_tokens=2, stream=True)
            release.set()
            await first
            await complete(client, max_tokens=2)  # the first gave its stream back
    finally:
        release.set()
        await client.close()
    assert refused.value.response.json()["error"]["type"] == "requests"
    assert refused.value.response.headers["retry-after"] == "1"


async def test_max_tokens_above_the_ceiling_is_refused_and_the_ceiling_holds_when_none_is_asked(served):
    client = client_of(served, "capped")
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await complete(client, max_tokens=4)
        chat = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hello"}], temperature=0
        )
    finally:
        await client.close()
    assert refused.value.body["param"] == "max_tokens" and "at most 3" in refused.value.body["message"]
    assert chat.usage.completion_tokens <= 3


async def test_usage_is_counted_per_user_and_a_caller_without_budgets_is_not_held(served):
    client = client_of(served, "free")
    try:
        answers = [await complete(client, max_tokens=2) for _ in range(3)]
    finally:
        await client.close()
    usage = served.gate.ledger.usage
    assert usage[("free", "prompt")] == sum(a.usage.prompt_tokens for a in answers)
    assert usage[("free", "completion")] == sum(a.usage.completion_tokens for a in answers)
