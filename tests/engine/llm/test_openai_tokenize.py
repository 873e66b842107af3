"""POST /tokenize and /detokenize (vLLM's) over the `llm` backend, served in process by OpenAIApp: a prompt's and a
conversation's ids equal the model's own tokenizer's and come back as the same text; an unknown model is a 404, a
model without a tokenizer and bad token ids 400s naming the field; credentials are asked for as on /v1; /v1/models
gives a tokenizing model's max_model_len."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import pytest_asyncio

from engine.errors import Unauthorized
from engine.frontend import V2App
from engine.frontend.openai import OpenAIApp
from engine.serving.admission import Principal
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from tests.engine.frontend.asgi_client import Answer, call

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEY = {"authorization": "Bearer good"}
QUESTION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is the capital of france?"}]
BODY_LIMIT = 4096


async def authenticate(scope) -> Principal:
    if (b"authorization", b"Bearer good") not in scope.get("headers", ()):
        raise Unauthorized("an API token is required (Authorization: Bearer <key>)")
    return Principal("tester", token_id=1)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def app(openai_llm_repository: Path):
    server = InferenceServer(openai_llm_repository, gpu_count=0, settings=EngineSettings())
    await server.start(load_models=True)
    try:
        yield OpenAIApp(server, V2App(server), authenticate=authenticate, max_body_bytes=BODY_LIMIT)
    finally:
        await server.stop()


@pytest.fixture(scope="module")
def tokenizer(tiny_llama_folder: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_llama_folder)


async def post(app, path: str, document: dict, headers: dict | None = None) -> Answer:
    return await call(app, "POST", path, json.dumps(document).encode(), KEY if headers is None else headers)


async def test_it_tokenizes_a_prompt_as_the_models_tokenizer_does_and_detokenizes_it_back(app, tokenizer):
    prompt = "the quick brown fox jumps over the lazy dog"
    answer = await post(app, "/tokenize", {"model": "tiny", "prompt": prompt, "return_token_strs": True})
    assert answer.status == 200, answer.body
    document = answer.json()
    assert document["tokens"] == tokenizer(prompt)["input_ids"]
    assert document["count"] == len(document["tokens"]) and document["max_model_len"] == 128
    assert document["token_strs"] == tokenizer.convert_ids_to_tokens(document["tokens"])
    back = await post(app, "/detokenize", {"model": "tiny", "tokens": document["tokens"]})
    assert back.status == 200 and back.json() == {"prompt": tokenizer.decode(document["tokens"])}
    assert back.json()["prompt"] == prompt


async def test_it_tokenizes_messages_through_the_chat_template_as_a_chat_generation_does(app, tokenizer):
    answer = await post(app, "/tokenize", {"model": "tiny", "messages": QUESTION})
    assert answer.status == 200, answer.body
    rendered = tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    assert answer.json()["tokens"] == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert answer.json()["token_strs"] is None
    bare = await post(app, "/tokenize", {"model": "tiny", "messages": QUESTION, "add_generation_prompt": False})
    assert bare.json()["count"] < answer.json()["count"]


async def test_an_unknown_model_is_a_404_and_a_model_without_a_tokenizer_a_400(app):
    missing = await post(app, "/tokenize", {"model": "nope", "prompt": "x"})
    assert missing.status == 404 and missing.json()["error"]["param"] == "model"
    echo = await post(app, "/detokenize", {"model": "text_echo", "tokens": [1, 2]})
    assert echo.status == 400 and "has no tokenizer" in echo.json()["error"]["message"]


async def test_bad_fields_are_400s_naming_them(app):
    for document, param in (
        ({"model": "tiny", "tokens": [1, -2]}, "tokens"),
        ({"model": "tiny", "tokens": "12"}, "tokens"),
        ({"model": "tiny", "tokens": [10**6]}, "tokens"),
    ):
        answer = await post(app, "/detokenize", document)
        assert answer.status == 400 and answer.json()["error"]["param"] == param, answer.body
    for document, param in (
        ({"model": "tiny", "prompt": 5}, "prompt"),
        ({"model": "tiny", "messages": []}, "messages"),
        ({"model": "tiny", "prompt": "x", "add_special_tokens": "yes"}, "add_special_tokens"),
    ):
        answer = await post(app, "/tokenize", document)
        assert answer.status == 400 and answer.json()["error"]["param"] == param, answer.body


async def test_it_asks_for_credentials_as_v1_does_and_bounds_the_body(app):
    for path in ("/tokenize", "/detokenize"):
        refused = await post(app, path, {"model": "tiny", "prompt": "x"}, headers={})
        assert refused.status == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert (await call(app, "GET", "/v1/models")).status == 401
    large = await post(app, "/tokenize", {"model": "tiny", "prompt": "x" * BODY_LIMIT})
    assert large.status == 413
    wrong = await call(app, "GET", "/tokenize", headers=KEY)
    assert wrong.status == 405


async def test_the_model_list_gives_the_max_model_len_of_a_model_with_a_tokenizer(app):
    answer = await call(app, "GET", "/v1/models", headers=KEY)
    cards = {card["id"]: card for card in answer.json()["data"]}
    assert cards["tiny"]["max_model_len"] == 128
    assert "max_model_len" not in cards["text_echo"]
