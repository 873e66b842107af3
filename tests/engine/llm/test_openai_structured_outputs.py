"""Structured outputs through the official `openai` client against a real server (a tiny random llm model, which
cannot write JSON by itself): response_format json_schema (strict) and json_object, vLLM's structured_outputs and
guided_choice / guided_regex, streamed and not; Triton's generate with structured_outputs in sampling_parameters;
a schema, regex or grammar the library cannot compile, two constraints at once, or a model that is not the llm
backend's, each a 400 naming the field."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import openai
import pytest

from tests.engine.llm.test_structured_outputs import PERSON

pytestmark = pytest.mark.server

QUESTION = [{"role": "user", "content": "who is the admin?"}]
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


def chat(client, model="tiny", **options):
    options = {"max_tokens": 100, "temperature": 1.0, **options}
    return client.chat.completions.create(model=model, messages=QUESTION, **options)


def test_it_holds_chat_answers_to_a_json_schema_for_every_seed(openai_llm_client):
    for seed in range(4):
        answer = chat(openai_llm_client, response_format=PERSON_FORMAT, seed=seed)
        choice = answer.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), PERSON)


def test_it_holds_a_streamed_completion_to_a_json_schema(openai_llm_client):
    chunks = list(
        openai_llm_client.completions.create(
            model="tiny",
            prompt="a person:",
            max_tokens=100,
            temperature=1.0,
            seed=5,
            stream=True,
            extra_body={"structured_outputs": {"json": PERSON}},
        )
    )
    text = "".join(chunk.choices[0].text for chunk in chunks if chunk.choices)
    jsonschema.validate(json.loads(text), PERSON)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_it_answers_a_json_object_for_json_object(openai_llm_client):
    answer = chat(openai_llm_client, response_format={"type": "json_object"}, seed=1, max_tokens=110)
    assert isinstance(json.loads(answer.choices[0].message.content), dict)


def test_it_answers_one_of_the_guided_choices_for_each_of_n(openai_llm_client):
    answer = chat(openai_llm_client, n=4, seed=2, extra_body={"guided_choice": ["yes", "no", "maybe"]})
    assert {choice.message.content for choice in answer.choices} <= {"yes", "no", "maybe"}
    assert all(choice.finish_reason == "stop" for choice in answer.choices)


def test_it_answers_text_matching_the_guided_regex(openai_llm_client):
    pattern = r"\d{3}-[a-z]{4}"
    answer = chat(openai_llm_client, seed=3, extra_body={"guided_regex": pattern})
    assert re.fullmatch(pattern, answer.choices[0].message.content)


def test_response_format_text_asks_for_nothing(openai_llm_client):
    answer = chat(openai_llm_client, response_format={"type": "text"}, max_tokens=5, temperature=0)
    assert answer.choices[0].finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True])
def test_a_schema_the_library_cannot_compile_is_a_400_naming_the_field_and_its_reason(openai_llm_client, stream):
    bad = {
        "type": "json_schema",
        "json_schema": {"name": "bad", "schema": {"type": "string", "minLength": 5, "maxLength": 2}},
    }
    with pytest.raises(openai.BadRequestError) as refused:
        chat(openai_llm_client, response_format=bad, stream=stream)
    error = refused.value.body
    assert error["param"] == "response_format"
    assert "response_format.json_schema.schema cannot be compiled" in error["message"]
    assert "minLength 5 is greater than maxLength 2" in error["message"]


def test_a_regex_the_library_cannot_compile_is_a_400_naming_it(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match="parenthesis is not closed") as refused:
        chat(openai_llm_client, extra_body={"guided_regex": "(ab"})
    assert refused.value.body["param"] == "guided_regex"


def test_a_schema_keyword_the_grammar_would_ignore_is_a_400_naming_it(openai_llm_client):
    schema = {"type": "object", "not": {"required": ["a"]}}
    with pytest.raises(openai.BadRequestError, match="'not' at #") as refused:
        chat(openai_llm_client, extra_body={"guided_json": schema})
    assert refused.value.body["param"] == "guided_json"


def test_two_constraints_at_once_are_a_400(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match="both constrain the answer") as refused:
        chat(openai_llm_client, response_format={"type": "json_object"}, extra_body={"guided_choice": ["a"]})
    assert refused.value.body["param"] == "guided_choice"


def test_a_model_that_is_not_the_llm_backends_answers_400_naming_the_field(openai_llm_client):
    with pytest.raises(openai.BadRequestError, match="not supported by model 'text_echo'") as refused:
        chat(openai_llm_client, model="text_echo", response_format={"type": "json_object"})
    assert refused.value.body["param"] == "response_format"


def test_a_vllm_option_this_server_does_not_have_is_refused_not_ignored(openai_llm_client):
    with pytest.raises(openai.BadRequestError) as refused:
        chat(openai_llm_client, extra_body={"guided_json": PERSON, "guided_decoding_backend": "outlines"})
    assert refused.value.body["param"] == "guided_decoding_backend"


def test_generate_takes_structured_outputs_in_sampling_parameters(openai_llm_addresses):
    address = openai_llm_addresses[0]
    sampling = {"max_tokens": 100, "temperature": 1.0, "seed": 9, "structured_outputs": {"json": PERSON}}
    body = {"text_input": "a person:", "sampling_parameters": json.dumps(sampling)}
    answer = httpx.post(f"http://{address}/v2/models/tiny/generate", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    assert answer.json()["finish_reason"] == "stop"
    jsonschema.validate(json.loads(answer.json()["text_output"]), PERSON)
    sampling["structured_outputs"] = {"regex": "(ab"}
    body["sampling_parameters"] = json.dumps(sampling)
    refused = httpx.post(f"http://{address}/v2/models/tiny/generate", json=body, timeout=120)
    assert refused.status_code == 400
    assert "structured_outputs.regex cannot be compiled" in refused.json()["error"]
