"""Tool calls through the official `openai` client against a real server (a tiny random llm model, which cannot call
a tool by itself, and the python `text_echo` model, which echoes its prompt a character at a time): a named function
and `required` held to the functions' schemas for every seed, streamed and not; `none` answers text; `auto` reads
Hermes calls out of the text, whole and streamed; a conversation with tool calls and results renders; a bad tool,
tool_choice or combination is a 400 naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import openai
import pytest

from tests.engine.decoupled_models import TEXT_ECHO, TEXT_ECHO_CONFIG
from tests.engine.frontend.server_process import running_server
from tests.engine.llm.test_llm_backend import CONFIG as TINY_CONFIG

pytestmark = pytest.mark.server

CONFIG = TINY_CONFIG.replace('string_value: "128"', 'string_value: "256"')  # max_model_len: room for calls
# the tiny model's template, which renders tools (their names: the tiny model takes 128 tokens) and calls
TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for tool in tools %}{{ tool.function.name }} {% endfor %}<|im_end|>\n"
    "{% endif %}{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}<tool_call>{{ call.function | tojson }}</tool_call>{% endfor %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 8},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET", "JST"]}, "hours24": {"type": "boolean"}},
    "required": ["zone", "hours24"],
    "additionalProperties": False,
}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name} somewhere", "parameters": schema}}
    for name, schema in SCHEMAS.items()
]
QUESTION = [{"role": "user", "content": "what is the weather in paris?"}]
DEEP: dict = {"type": "object"}
for _ in range(100):
    DEEP = {"type": "object", "properties": {"a": DEEP}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
HERMES_CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius", "days": 2}}\n</tool_call>'
)


@pytest.fixture(scope="module")
def openai_llm_client(tiny_llama_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    """The `openai` client of a real server over `tiny` (its template rendering tools) and `text_echo`."""
    repo = tmp_path_factory.mktemp("openai-tools-repo")
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(CONFIG)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    (repo / "tiny" / "1" / "chat_template.jinja").write_text(TEMPLATE)
    (repo / "text_echo" / "1").mkdir(parents=True)
    (repo / "text_echo" / "config.pbtxt").write_text(TEXT_ECHO_CONFIG)
    (repo / "text_echo" / "1" / "model.py").write_text(TEXT_ECHO)
    log = tmp_path_factory.mktemp("openai-tools-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log) as address:
        yield openai.OpenAI(base_url=f"http://{address}/v1", api_key="unused", max_retries=0, timeout=120)


def chat(client, model="tiny", **options):
    options = {"max_tokens": 120, "temperature": 1.0, "tools": TOOLS, **options}
    return client.chat.completions.create(model=model, messages=options.pop("messages", QUESTION), **options)


def streamed_calls(chunks) -> tuple[list[dict], str, list[str | None], list]:
    """The calls a stream's deltas assemble (as the openai client's users do), its content and finish reasons, and
    each call's first delta."""
    calls: dict[int, dict] = {}
    firsts = []
    content = ""
    reasons = []
    for chunk in chunks:
        for choice in chunk.choices:
            reasons.append(choice.finish_reason)
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                if delta.index not in calls:
                    firsts.append(delta)
                    calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
                calls[delta.index]["arguments"] += delta.function.arguments or ""
    return [calls[i] for i in sorted(calls)], content, [r for r in reasons if r is not None], firsts


def test_it_calls_the_named_function_with_valid_arguments_for_every_seed(openai_llm_client):
    for seed in range(4):
        choice = chat(openai_llm_client, tool_choice=NAMED, seed=seed).choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)


def test_it_streams_the_named_function_call_id_and_name_first_then_its_arguments(openai_llm_client):
    for seed in (11, 12):
        calls, content, reasons, firsts = streamed_calls(
            chat(openai_llm_client, tool_choice=NAMED, seed=seed, stream=True)
        )
        assert reasons == ["tool_calls"]
        assert content == ""
        (call,) = calls
        assert firsts[0].id.startswith("call_") and firsts[0].type == "function"
        assert firsts[0].function.name == "get_weather"
        jsonschema.validate(json.loads(call["arguments"]), WEATHER)


def test_it_calls_one_of_the_tools_for_required(openai_llm_client):
    names = set()
    for seed in range(4):
        choice = chat(openai_llm_client, tool_choice="required", parallel_tool_calls=False, seed=seed).choices[0]
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        names.add(call.function.name)
    assert names <= set(SCHEMAS)


def test_it_streams_one_or_more_valid_calls_for_required(openai_llm_client):
    # seeds whose sampling (a random tiny model, parallel calls allowed) ends its calls within 200 tokens: 2 and 1
    # calls with the schemas' properties in their own order; most seeds go on calling until the length runs out
    for seed in (21, 27):
        calls, _, reasons, _ = streamed_calls(
            chat(openai_llm_client, tool_choice="required", seed=seed, stream=True, max_tokens=200)
        )
        assert reasons == ["tool_calls"] and calls
        assert len({call["id"] for call in calls}) == len(calls)
        for call in calls:
            jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])


def test_it_answers_text_and_no_calls_for_none(openai_llm_client):
    choice = chat(openai_llm_client, tool_choice="none", max_tokens=8, temperature=0).choices[0]
    assert choice.message.tool_calls is None
    assert isinstance(choice.message.content, str) and choice.finish_reason == "length"


def test_it_reads_a_hermes_call_out_of_the_answer_for_auto(openai_llm_client):
    regex = r"Sure\.\n" + HERMES_CALL.replace("{", r"\{").replace("}", r"\}").replace("|", r"\|")
    choice = chat(openai_llm_client, tool_choice="auto", extra_body={"guided_regex": regex}).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Sure.\n"
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius", "days": 2}
    calls, content, reasons, _ = streamed_calls(
        chat(openai_llm_client, extra_body={"guided_regex": regex}, stream=True, seed=3)
    )
    assert (content, reasons, [c["name"] for c in calls]) == ("Sure.\n", ["tool_calls"], ["get_weather"])
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "unit": "celsius", "days": 2}


def test_it_reads_calls_streamed_a_character_at_a_time(openai_llm_client):
    """text_echo answers "echo: user: <its prompt>" one character per chunk: every split of the call is met."""
    prompt = [{"role": "user", "content": f"{HERMES_CALL}\n{HERMES_CALL.replace('Paris', 'Lima')}"}]
    options = {"messages": prompt, "max_tokens": 400, "model": "text_echo"}
    calls, content, reasons, firsts = streamed_calls(chat(openai_llm_client, stream=True, **options))
    assert [json.loads(call["arguments"])["city"] for call in calls] == ["Paris", "Lima"]
    assert [first.function.name for first in firsts] == ["get_weather", "get_weather"]
    assert content == "echo: user: " + "assistant:"  # the text around the calls
    assert reasons == ["tool_calls"]
    whole = chat(openai_llm_client, **options).choices[0]
    assert [json.loads(c.function.arguments)["city"] for c in whole.message.tool_calls] == ["Paris", "Lima"]
    assert whole.message.content == content
    one = chat(openai_llm_client, parallel_tool_calls=False, **options).choices[0]
    assert [json.loads(c.function.arguments)["city"] for c in one.message.tool_calls] == ["Paris"]
    calls, _, reasons, _ = streamed_calls(chat(openai_llm_client, stream=True, parallel_tool_calls=False, **options))
    assert ([call["name"] for call in calls], reasons) == (["get_weather"], ["tool_calls"])


def test_it_renders_a_conversation_with_tool_calls_and_results(openai_llm_client):
    arguments = json.dumps({"city": "Paris", "unit": "celsius", "days": 1})
    conversation = [
        *QUESTION,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'},
    ]
    choice = chat(openai_llm_client, messages=conversation, max_tokens=4, temperature=0).choices[0]
    assert choice.finish_reason == "length"
    called = chat(openai_llm_client, tool_choice=NAMED, seed=1).choices[0].message  # sent back as the client has it
    result = {"role": "tool", "tool_call_id": called.tool_calls[0].id, "content": "21"}
    choice = chat(openai_llm_client, messages=[*QUESTION, called, result], max_tokens=4, temperature=0).choices[0]
    assert choice.finish_reason == "length"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "get_stock"}}}, "get_stock"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]}, "JSON schema object"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]},
            "tools[0].function.parameters is not a valid JSON schema: 'objekt' is not valid",
        ),
        ({"tools": TOOLS * 2}, "given twice"),
        ({"tools": [TOOLS[0]] * 129}, "at most 128"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": DEEP}}]}, "at most 64 levels"),
        ({"tools": None, "tool_choice": "required"}, "'tool_choice' is only allowed"),
        ({"tool_choice": "sometimes"}, "'tool_choice' must be"),
        ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "both constrain"),
        ({"tool_choice": NAMED, "model": "text_echo"}, "not supported by model 'text_echo'"),
        (
            {
                "tool_choice": "required",
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"oneOf": [{}, {}]}}}],
            },
            "tools[0].function.parameters uses 'oneOf'",
        ),
    ],
)
def test_a_bad_tool_or_tool_choice_is_a_400_naming_it(openai_llm_client, options, words):
    if options.get("tools", TOOLS) is None:
        options = {key: value for key, value in options.items() if key != "tools"}
        options["tools"] = openai.NOT_GIVEN
    with pytest.raises(openai.BadRequestError) as caught:
        chat(openai_llm_client, **options)
    assert words in caught.value.body["message"]


def test_a_tool_result_without_its_call_id_is_a_400(openai_llm_client):
    with pytest.raises(openai.BadRequestError) as caught:
        chat(openai_llm_client, messages=[*QUESTION, {"role": "tool", "content": "21"}])
    assert "messages[1].tool_call_id" in caught.value.body["message"]
