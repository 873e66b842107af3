"""The demo `text_generator` as `manage.py serve` seeds and serves it: 16 streams at once each get their own text,
exactly what their prompt gets alone (temperature 0), while the model's decode steps hold several sequences at once
(the steps and sequence-steps counters the model exports on /metrics); the official openai client completes and chats
with it through the console, streamed and not."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServerProcess, manage_command

pytestmark = pytest.mark.server

READY_S = 120
MAX_TOKENS = 24
PROMPTS = [
    "The module",
    "A function is",
    "When the loop",
    "Python is a",
    "class Example:",
    "An object has",
    "If the value",
    "The list of",
    "import os\n",
    "def main():",
    "Exceptions are",
    "return the",
    "for each item",
    "The string",
    "# comment",
    "Numbers can",
]


@pytest.fixture(scope="module")
def served(infera_server: ServerProcess) -> ServerProcess:
    """The session's console, once its seeded text_generator is READY."""
    assert infera_server.wait_for("/v2/models/text_generator/ready", timeout=READY_S) == 200
    return infera_server


def step_counters(server: ServerProcess) -> tuple[float, float]:
    """(decode steps, sequences summed over steps) of text_generator version 1, from /metrics."""
    status, body = server.get("/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.labels == {"model": "text_generator", "version": "1"} and sample.name.startswith(
                "text_generator_"
            ):
                found[sample.name] = sample.value
    return found["text_generator_steps_total"], found["text_generator_sequence_steps_total"]


async def generate(session: aiohttp.ClientSession, url: str, prompt: str) -> str:
    """The text one stream of generate_stream brings, its SSE events parsed one by one."""
    body = {"text_input": prompt, "stream": True, "max_tokens": MAX_TOKENS, "temperature": 0}
    async with session.post(url, json=body) as answer:
        assert answer.status == 200, await answer.text()
        assert answer.headers["content-type"].startswith("text/event-stream")
        text = await answer.text()
    events = [json.loads(chunk.removeprefix("data: ")) for chunk in text.split("\n\n") if chunk]
    assert all("error" not in event for event in events), events
    assert all(event["model_name"] == "text_generator" for event in events)
    return "".join(event["text_output"] for event in events)


async def alone_then_together(server: ServerProcess) -> tuple[dict, dict, tuple, tuple]:
    url = f"{server.base_url}/v2/models/text_generator/generate_stream"
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        first = step_counters(server)
        alone = {prompt: await generate(session, url, prompt) for prompt in PROMPTS}
        between = step_counters(server)
        texts = await asyncio.gather(*(generate(session, url, prompt) for prompt in PROMPTS))
        last = step_counters(server)
    together = dict(zip(PROMPTS, texts, strict=True))
    return alone, together, (between[0] - first[0], between[1] - first[1]), (last[0] - between[0], last[1] - between[1])


def test_sixteen_streams_at_once_each_get_their_own_text_while_steps_batch_them(served: ServerProcess):
    alone, together, (steps_alone, fed_alone), (steps_together, fed_together) = asyncio.run(alone_then_together(served))
    assert together == alone  # no stream got another's tokens, none lost or repeated one
    assert all(len(text) == MAX_TOKENS for text in alone.values())
    assert len(set(alone.values())) > 1  # distinct prompts, their own continuations
    tokens = len(PROMPTS) * MAX_TOKENS
    assert fed_alone == steps_alone == tokens  # one sequence per step while they came one at a time
    assert fed_together == tokens
    assert steps_together < fed_together, f"{steps_together} steps for {fed_together} sequence-steps"


def test_the_openai_client_completes_and_chats_with_it(served: ServerProcess):
    key = manage_command(served.var_dir, {})("issue_token", "admin")  # the same API tokens as /v2 and /api/
    client = openai.OpenAI(base_url=f"{served.base_url}/v1", api_key=key, max_retries=0)
    assert "text_generator" in [model.id for model in client.models.list()]
    asked = {"model": "text_generator", "max_tokens": 16, "temperature": 0}
    completion = client.completions.create(prompt="The module", **asked)
    text = completion.choices[0].text
    assert len(text) == 16 and completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 16 and completion.usage.prompt_tokens == len("The module")
    chunks = list(client.completions.create(prompt="The module", stream=True, **asked))
    assert "".join(chunk.choices[0].text for chunk in chunks) == text and len(chunks) > 2
    messages = [{"role": "user", "content": "What is a module?"}]
    chat = client.chat.completions.create(messages=messages, **asked)
    answer = chat.choices[0].message
    assert answer.role == "assistant" and len(answer.content) == 16
    pieces = list(client.chat.completions.create(messages=messages, stream=True, **asked))
    assert pieces[0].choices[0].delta.role == "assistant"
    assert "".join(piece.choices[0].delta.content or "" for piece in pieces) == answer.content
