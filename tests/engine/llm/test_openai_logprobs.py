"""Logprobs through the official `openai` client against a real server (a tiny llm model): a completion's
`logprobs: k` and a chat's `logprobs: true, top_logprobs: k`, streamed and not, equal to a log-softmax of
transformers' own logits for greedy steps, and the same as tritonclient reads them from the model's `logprobs`
output; refusals name the field (k past 20, top_logprobs without logprobs, a model that reports no logprobs)."""

from __future__ import annotations

import json
import queue
from pathlib import Path

import numpy as np
import openai
import pytest
import torch

pytestmark = pytest.mark.server

PROMPT = "a paged cache keeps"
QUESTION = [{"role": "user", "content": "what is the capital of france?"}]
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def reference(tiny_llama_folder: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_folder, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_llama_folder)


def greedy_steps(reference, prompt_ids: list[int], steps: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy tokens after the prompt and the log-softmax of its logits at each: [steps, vocab]."""
    model, _ = reference
    ids = list(prompt_ids)
    with torch.inference_mode():
        for _ in range(steps):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        logits = model(torch.tensor([ids])).logits[0, len(prompt_ids) - 1 : -1]
    return ids[len(prompt_ids) :], torch.log_softmax(logits.float(), dim=-1)


def test_a_completions_logprobs_are_transformers_log_softmax_of_each_greedy_step(openai_llm_client, reference):
    completion = openai_llm_client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=3
    )
    logprobs = completion.choices[0].logprobs
    _, tokenizer = reference
    tokens, expected = greedy_steps(reference, tokenizer(PROMPT)["input_ids"], len(logprobs.tokens))
    assert len(logprobs.tokens) == completion.usage.completion_tokens
    assert logprobs.tokens == [tokenizer.decode([token]) for token in tokens]
    offset = 0
    for step, token in enumerate(tokens):
        assert abs(logprobs.token_logprobs[step] - expected[step, token].item()) < TOLERANCE
        values, ids = expected[step].topk(3)
        top = logprobs.top_logprobs[step]
        assert set(top) == {tokenizer.decode([i]) for i in ids.tolist()}  # greedy: the chosen token is among them
        for value, i in zip(values.tolist(), ids.tolist(), strict=True):
            assert abs(top[tokenizer.decode([i])] - value) < TOLERANCE
        assert logprobs.text_offset[step] == offset
        offset += len(logprobs.tokens[step])


def test_a_chats_logprobs_list_each_token_with_its_bytes_and_top_alternatives(openai_llm_client, reference):
    answer = openai_llm_client.chat.completions.create(
        model="tiny", messages=QUESTION, max_tokens=5, temperature=0, logprobs=True, top_logprobs=2
    )
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens
    _, tokenizer = reference
    prompt = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    tokens, expected = greedy_steps(reference, tokenizer(prompt, add_special_tokens=False)["input_ids"], len(content))
    for step, (item, token) in enumerate(zip(content, tokens, strict=True)):
        assert item.token == tokenizer.decode([token]) and item.bytes == list(item.token.encode())
        assert abs(item.logprob - expected[step, token].item()) < TOLERANCE
        assert [alternative.token for alternative in item.top_logprobs][0] == item.token
        assert len(item.top_logprobs) == 2


def test_streamed_logprobs_are_the_whole_answers_token_by_token(openai_llm_client):
    options = {"model": "tiny", "messages": QUESTION, "max_tokens": 5, "temperature": 0, "logprobs": True}
    whole = openai_llm_client.chat.completions.create(**options)
    chunks = list(openai_llm_client.chat.completions.create(stream=True, **options))
    streamed = [item for c in chunks for choice in c.choices if choice.logprobs for item in choice.logprobs.content]
    assert [(i.token, round(i.logprob, 4)) for i in streamed] == [
        (i.token, round(i.logprob, 4)) for i in whole.choices[0].logprobs.content
    ]
    assert all(item.top_logprobs == [] for item in streamed)  # top_logprobs absent: none, as vLLM answers


def test_a_streamed_completions_text_offsets_start_where_each_chunks_text_does(openai_llm_client):
    chunks = list(
        openai_llm_client.completions.create(
            model="tiny", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=1, stream=True
        )
    )
    sent = 0
    for chunk in chunks:
        logprobs = chunk.choices[0].logprobs
        if logprobs is not None and logprobs.tokens:
            assert logprobs.text_offset[0] == sent
        sent += len(chunk.choices[0].text)
    assert sum(len(c.choices[0].logprobs.tokens) for c in chunks if c.choices[0].logprobs) == 6


def test_a_model_that_reports_no_logprobs_answers_400_naming_the_field(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match="'logprobs' is not supported by model 'text_echo'") as refused:
        openai_llm_client.completions.create(model="text_echo", prompt="hi", logprobs=2)
    assert refused.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError, match="'logprobs' is not supported by model 'text_echo'"):
        openai_llm_client.chat.completions.create(model="text_echo", messages=QUESTION, logprobs=True)


def test_k_past_20_or_top_logprobs_without_logprobs_is_a_400_naming_the_field(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match="'logprobs' must be between 0 and 20") as refused:
        openai_llm_client.completions.create(model="tiny", prompt=PROMPT, logprobs=21)
    assert refused.value.body["param"] == "logprobs"
    with pytest.raises(openai.BadRequestError, match="'top_logprobs' must be between 0 and 20") as refused:
        openai_llm_client.chat.completions.create(model="tiny", messages=QUESTION, logprobs=True, top_logprobs=21)
    assert refused.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError, match="'top_logprobs' needs 'logprobs' set to true"):
        openai_llm_client.chat.completions.create(model="tiny", messages=QUESTION, top_logprobs=2)


def test_tritonclient_reads_the_same_logprobs_from_the_models_stream(openai_llm_client, openai_llm_addresses):
    import tritonclient.grpc as grpcclient

    completion = openai_llm_client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2
    )
    inputs = []
    for name, value, kind in (
        ("text_input", PROMPT.encode(), "BYTES"),
        ("sampling_parameters", json.dumps({"max_tokens": 4, "temperature": 0, "logprobs": 2}).encode(), "BYTES"),
        ("stream", True, "BOOL"),
    ):
        tensor = grpcclient.InferInput(name, [1], kind)
        tensor.set_data_from_numpy(np.array([value], dtype=np.object_ if kind == "BYTES" else np.bool_))
        inputs.append(tensor)
    received: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(openai_llm_addresses[1])
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    try:
        client.async_stream_infer("tiny", inputs, request_id="lp")
        entries = []
        while len(entries) < 4:
            result, error = received.get(timeout=60)
            assert error is None, error
            entries += json.loads(result.as_numpy("logprobs")[0])
    finally:
        client.stop_stream()
        client.close()
    expected = completion.choices[0].logprobs
    assert [entry["token"] for entry in entries] == expected.tokens
    for entry, logprob, top in zip(entries, expected.token_logprobs, expected.top_logprobs, strict=True):
        assert abs(entry["logprob"] - logprob) < TOLERANCE
        assert {alternative["token"] for alternative in entry["top_logprobs"]} == set(top)
