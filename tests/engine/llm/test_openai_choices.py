"""`n` choices through the official `openai` client against a real server (a tiny llm model): n answers indexed
0..n-1, streamed (each chunk names its choice) and not, usage counting the prompt once and every choice's tokens,
choice i seeded `seed + i` (vLLM's rule) so each is reproducible; n past its bound is a 400 naming it."""

from __future__ import annotations

import openai
import pytest

from engine.frontend.openai_fields import MAX_CHOICES

pytestmark = pytest.mark.server

PROMPT = "the quick brown fox"
QUESTION = [{"role": "user", "content": "what is the capital of france?"}]


def complete(client, **options):
    return client.completions.create(model="tiny", prompt=PROMPT, max_tokens=5, temperature=1.0, **options)


def chat(client, **options):
    return client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=6, temperature=1.0, **options)


def test_it_answers_n_choices_indexed_with_usage_over_all_of_them(openai_llm_client):
    one = complete(openai_llm_client, seed=7)
    three = complete(openai_llm_client, n=3, seed=7)
    assert [choice.index for choice in three.choices] == [0, 1, 2]
    assert all(choice.finish_reason == "length" for choice in three.choices)
    assert three.usage.prompt_tokens == one.usage.prompt_tokens  # the prompt counts once
    assert three.usage.completion_tokens == 15
    assert three.usage.total_tokens == three.usage.prompt_tokens + 15


def test_each_seeded_choice_is_reproducible_and_is_the_request_seeded_seed_plus_its_index(openai_llm_client):
    first = chat(openai_llm_client, n=3, seed=11)
    again = chat(openai_llm_client, n=3, seed=11)
    texts = [choice.message.content for choice in first.choices]
    assert texts == [choice.message.content for choice in again.choices]
    alone = [chat(openai_llm_client, seed=11 + i).choices[0].message.content for i in range(3)]
    assert texts == alone


def test_streamed_choices_carry_their_index_and_give_the_whole_answers_text(openai_llm_client):
    whole = complete(openai_llm_client, n=2, seed=5)
    chunks = list(complete(openai_llm_client, n=2, seed=5, stream=True))
    texts = {0: "", 1: ""}
    finished = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            if choice.finish_reason is not None:
                finished[choice.index] = choice.finish_reason
    assert texts == {choice.index: choice.text for choice in whole.choices}
    assert finished == {0: "length", 1: "length"}
    assert chunks[-1].usage.completion_tokens == 10
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_a_streamed_chat_opens_every_choice_with_its_role(openai_llm_client):
    whole = chat(openai_llm_client, n=2, seed=3)
    chunks = list(chat(openai_llm_client, n=2, seed=3, stream=True))
    assert [(c.choices[0].index, c.choices[0].delta.role) for c in chunks[:2]] == [(0, "assistant"), (1, "assistant")]
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {choice.index: choice.message.content for choice in whole.choices}
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_a_text_generator_without_an_engine_answers_n_choices_too(openai_llm_client):
    answer = openai_llm_client.completions.create(model="text_echo", prompt="hi", max_tokens=50, n=2)
    assert [(c.index, c.text) for c in answer.choices] == [(0, "echo: hi"), (1, "echo: hi")]
    assert answer.usage.completion_tokens == 16


def test_n_past_its_bound_is_a_400_naming_it(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match=f"'n' must be between 1 and {MAX_CHOICES}") as refused:
        complete(openai_llm_client, n=MAX_CHOICES + 1)
    assert refused.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError, match="'n' must be between"):
        chat(openai_llm_client, n=0)
