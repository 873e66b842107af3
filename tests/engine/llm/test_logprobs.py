"""Logprobs from the engine loop: for greedy steps, each token's logprob and its alternatives equal a log-softmax of
transformers' own logits for the same prefix (vLLM's default: the model's raw distribution, before temperature)."""

from __future__ import annotations

import torch

from engine.llm.model_runner import ModelRunner
from tests.engine.llm.test_engine_loop import engine, reference, runner, submit  # noqa: F401 - fixtures
from tests.engine.llm.tiny_llama import PROMPTS

TOLERANCE = 1e-4


def reference_logprobs(model: torch.nn.Module, loaded: ModelRunner, prompt: str, tokens: list[int]) -> torch.Tensor:
    """log_softmax of transformers' logits at each generated position: [len(tokens), vocab]."""
    ids = loaded.tokenizer(prompt)["input_ids"]
    with torch.inference_mode():
        logits = model(torch.tensor([ids + tokens])).logits[0, len(ids) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1)


def test_it_reports_each_greedy_tokens_logprob_and_top_alternatives_as_transformers_computes_them(
    engine,  # noqa: F811
    runner,  # noqa: F811
    reference,  # noqa: F811
):
    for prompt in PROMPTS[:3]:
        sink = submit(engine, prompt, max_tokens=8, logprobs=5)
        assert sink.final.finish_reason == "length"
        drawn = [token for update in sink.updates for token in update.logprobs]
        assert [token.token_id for token in drawn] == sink.tokens
        expected = reference_logprobs(reference, runner, prompt, sink.tokens)
        for step, token in enumerate(drawn):
            assert abs(token.logprob - expected[step, token.token_id].item()) < TOLERANCE
            values, ids = expected[step].topk(5)
            assert [t for t, _ in token.top_logprobs] == ids.tolist()
            assert torch.allclose(torch.tensor([v for _, v in token.top_logprobs]), values, atol=TOLERANCE)
            assert token.top_logprobs[0][0] == token.token_id  # greedy: the chosen token is the most likely


def test_the_logprobs_are_the_models_own_whatever_the_temperature(engine, runner, reference):  # noqa: F811
    sink = submit(engine, PROMPTS[4], max_tokens=6, temperature=1.7, seed=3, logprobs=0)
    assert sink.final.completion_tokens == 6
    drawn = [token for update in sink.updates for token in update.logprobs]
    expected = reference_logprobs(reference, runner, PROMPTS[4], sink.tokens)
    for step, token in enumerate(drawn):
        assert abs(token.logprob - expected[step, token.token_id].item()) < TOLERANCE
        assert token.top_logprobs == ()


def test_a_request_without_logprobs_gets_none(engine):  # noqa: F811
    sink = submit(engine, PROMPTS[1], max_tokens=4)
    assert sink.final.completion_tokens == 4
    assert all(update.logprobs == () for update in sink.updates)
