"""A language model's page (its config takes chat messages) has the chat: a system prompt, the sampling settings
within the engine's bounds, the conversation, Send, Stop and Clear, and its scripts; a text generator without
messages keeps the completion playground, and a model that generates no text the v2 Try-it."""

from __future__ import annotations

import pytest
from django.conf import settings

from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.accounts.conftest import signed_in

GENERATOR = {"openai_text_input": "text_input", "openai_text_output": "text_output"}
LANGUAGE_MODEL = {**GENERATOR, "openai_messages_input": "messages", "max_model_len": "128"}


def register(name: str, backend: str, parameters: dict[str, str]) -> None:
    config = {
        "name": name,
        "backend": backend,
        "parameters": {key: {"string_value": value} for key, value in parameters.items()},
    }
    model = RegisteredModel.objects.create(name=name)
    version = ModelVersion.objects.create(model=model, number=1, state=VersionState.READY, config=config)
    model.active_version = version
    model.save()


@pytest.mark.django_db
def test_it_shows_the_chat_on_a_language_models_page(viewer):
    register("tiny", "llm", LANGUAGE_MODEL)
    html = signed_in(viewer).get("/models/tiny/").content.decode()
    assert 'id="chat" data-model="tiny"' in html
    for field in ("chat-system", "chat-message", "chat-temperature", "chat-top-p", "chat-max-tokens", "chat-seed"):
        assert f'<label for="{field}">' in html and f'id="{field}"' in html
    for button in ("chat-send", "chat-stop", "chat-clear"):
        assert f'id="{button}"' in html
    assert 'id="chat-temperature" min="0" max="2"' in html  # the engine's /v1 bounds
    assert 'id="chat-top-p" min="0.01" max="1"' in html
    assert 'id="chat-max-tokens" min="1" max="128"' in html  # the model's max_model_len, under the engine's limit
    assert "registry/chat.js" in html and "registry/event_stream.js" in html
    assert 'id="playground"' not in html and 'id="try-form"' not in html
    assert 'id="llm-metrics"' in html  # the live panel stays beside it


@pytest.mark.django_db
def test_it_bounds_max_tokens_by_the_engines_limit_without_a_declared_length(viewer):
    register("tiny", "llm", {**GENERATOR, "openai_messages_input": "messages"})
    html = signed_in(viewer).get("/models/tiny/").content.decode()
    limit = settings.INFERA.engine.openai.max_tokens
    assert f'id="chat-max-tokens" min="1" max="{limit}" step="1"\n                 value="256"' in html


@pytest.mark.django_db
def test_it_keeps_the_completion_playground_for_other_text_generators(viewer):
    register("text_echo", "python", GENERATOR)
    html = signed_in(viewer).get("/models/text_echo/").content.decode()
    assert 'id="playground" data-model="text_echo"' in html and "registry/playground.js" in html
    assert 'id="chat"' not in html and "registry/chat.js" not in html


@pytest.mark.django_db
def test_it_keeps_the_v2_try_it_for_models_that_generate_no_text(viewer):
    register("simple", "onnxruntime", {})
    html = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="try-form"' in html
    assert 'id="chat"' not in html and 'id="playground"' not in html
