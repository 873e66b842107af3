"""The OpenAI-compatible endpoints, driven by the official `openai` client over real HTTP: models, completions and
chat completions, streamed and not, max_tokens, stop strings, usage, and errors in OpenAI's shape."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest

from tests.engine.decoupled_models import build_decoupled_repository
from tests.engine.frontend.server_process import running_server
from tests.engine.model_factory import make_simple_onnx


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    repo = build_decoupled_repository(tmp_path_factory.mktemp("openai-repo"))
    make_simple_onnx(repo, "simple")
    log = tmp_path_factory.mktemp("openai-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log) as address:
        yield openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0)


def test_it_lists_the_models_that_generate_text(client):
    assert [model.id for model in client.models.list()] == ["text_echo"]


def test_it_completes_a_prompt(client):
    completion = client.completions.create(model="text_echo", prompt="hi", max_tokens=50)
    choice = completion.choices[0]
    assert choice.text == "echo: hi" and choice.finish_reason == "stop"
    assert completion.usage.completion_tokens == 8 and completion.usage.prompt_tokens == 2
    assert completion.usage.total_tokens == 10 and completion.model == "text_echo"


def test_it_stops_at_max_tokens(client):
    completion = client.completions.create(model="text_echo", prompt="a long prompt", max_tokens=4)
    assert completion.choices[0].text == "echo" and completion.choices[0].finish_reason == "length"


def test_it_streams_a_completion_in_pieces_then_done(client):
    chunks = list(client.completions.create(model="text_echo", prompt="stream", max_tokens=50, stream=True))
    assert "".join(chunk.choices[0].text for chunk in chunks) == "echo: stream"
    assert chunks[-1].choices[0].finish_reason == "stop" and len(chunks) > 5


def test_it_answers_a_chat(client):
    chat = client.chat.completions.create(
        model="text_echo", messages=[{"role": "user", "content": "hello"}], max_tokens=100
    )
    message = chat.choices[0].message
    assert message.role == "assistant" and message.content == "echo: user: hello\nassistant:"
    assert chat.object == "chat.completion" and chat.usage.completion_tokens == len(message.content)


def test_it_streams_a_chat_with_a_role_first(client):
    chunks = list(
        client.chat.completions.create(
            model="text_echo", messages=[{"role": "user", "content": "x"}], max_tokens=100, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "echo: user: x\nassistant:"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_it_cuts_the_text_at_a_stop_string(client):
    completion = client.completions.create(model="text_echo", prompt="one two three", max_tokens=50, stop=[" two"])
    assert completion.choices[0].text == "echo: one" and completion.choices[0].finish_reason == "stop"
    streamed = client.completions.create(model="text_echo", prompt="one two", max_tokens=50, stop="two", stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed) == "echo: one "


def test_it_names_what_is_wrong_in_openai_shape(client):
    with pytest.raises(openai.NotFoundError) as missing:
        client.completions.create(model="nope", prompt="x")
    assert "The model 'nope' does not exist" in str(missing.value)
    with pytest.raises(openai.BadRequestError, match="does not generate text"):
        client.completions.create(model="simple", prompt="x")
    with pytest.raises(openai.BadRequestError, match="'max_tokens' must be a whole number"):
        client.completions.create(model="text_echo", prompt="x", max_tokens=1.5)
    with pytest.raises(openai.BadRequestError, match="'messages' must be a non-empty list"):
        client.chat.completions.create(model="text_echo", messages=[])


def test_it_answers_unknown_paths_with_404(client):
    try:
        urllib.request.urlopen(str(client.base_url) + "audio/speech", timeout=10)
    except urllib.error.HTTPError as error:
        assert error.code == 404 and json.loads(error.read())["error"]["type"] == "not_found_error"
    else:
        pytest.fail("expected 404")
