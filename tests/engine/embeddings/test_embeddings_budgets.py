"""/v1/embeddings held to the caller's token budgets, with the `openai` client against a real server (a python model
that embeds, so nothing heavy loads): the inputs' tokens count against tokens per minute and as the caller's prompt
usage, and over the budget the answer is a 429 in OpenAI's rate-limit shape with Retry-After. The callers are
test_openai_budgets' ("spent": 5 tokens a minute, "free": no budget); the gate's clock stands still, so the minute
never turns during a test."""

from __future__ import annotations

import openai
import pytest
import pytest_asyncio

from engine.llm.budgets import BudgetGate
from tests.engine.embeddings.test_openai_embeddings import LETTERS_CONFIG, LETTERS_MODEL
from tests.engine.llm.served import serving
from tests.engine.llm.test_openai_budgets import assert_spent_its_minute, authenticate, client_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def served(tmp_path_factory):
    repo = tmp_path_factory.mktemp("embeddings-budgets-repo")
    (repo / "letters" / "1").mkdir(parents=True)
    (repo / "letters" / "1" / "model.py").write_text(LETTERS_MODEL)
    (repo / "letters" / "config.pbtxt").write_text(LETTERS_CONFIG)
    gate = BudgetGate(clock=lambda: 6000.0)  # the start of a minute, for every request of the module
    async with serving(repo, authenticate=authenticate, budgets=gate) as served:
        served.gate = gate
        yield served


async def test_embeddings_over_the_tokens_per_minute_get_429_with_retry_after(served):
    client = client_of(served, "spent")
    try:
        first = await client.embeddings.create(model="letters", input="banana")  # 6 tokens of the minute's 5
        with pytest.raises(openai.RateLimitError) as refused:
            await client.embeddings.create(model="letters", input="a")
    finally:
        await client.close()
    assert first.usage.prompt_tokens == 6
    assert_spent_its_minute(refused.value)


async def test_embeddings_are_counted_as_the_callers_prompt_tokens(served):
    client = client_of(served, "free")
    try:
        answers = [await client.embeddings.create(model="letters", input=["abc", "de"]) for _ in range(2)]
    finally:
        await client.close()
    assert [answer.usage.prompt_tokens for answer in answers] == [5, 5]
    assert served.gate.ledger.usage[("free", "prompt")] == 10
    assert ("free", "completion") not in served.gate.ledger.usage
    assert served.gate.ledger.token_usage[(14, "free", "prompt")] == 10
