"""The Hermes tool-call parser on crafted text, whole and split across stream pieces at every size; its structural
tag compiled by xgrammar (a valid call is accepted, a bad one refused); the registry; and conversations with tools
made ready for templates that render tools and for those that do not."""

from __future__ import annotations

import json

import pytest

from engine.errors import InvalidArgument
from engine.llm.structured import StructuredOutput, compile_grammar
from engine.llm.tool_parsers import (
    Arguments,
    CallStarted,
    HermesToolCalls,
    Text,
    ToolCall,
    UnknownToolParser,
    chat_messages,
    parser_named,
    template_messages,
    whole,
)

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa}ri\\"s", "days": [1, {"x": "<"}]}}\n</tool_call>'
WEATHER = ToolCall("get_weather", '{"city": "Pa}ri\\"s", "days": [1, {"x": "<"}]}')
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def parsed(text: str, size: int) -> tuple[str, list[ToolCall], list]:
    stream = HermesToolCalls.stream()
    events = []
    for start in range(0, len(text), size):
        events += stream.feed(text[start : start + size])
    events += stream.finish()
    return (*whole(events), events)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13, 10_000])
def test_it_reads_text_and_calls_split_at_every_size(size):
    text = f'Sure!\n{CALL}\n<tool_call>\n{{"arguments": {{"a": 1}}, "name": "get_time"}}\n</tool_call>\n'
    content, calls, _ = parsed(text, size)
    assert content == "Sure!\n"
    assert calls == [WEATHER, ToolCall("get_time", '{"a": 1}')]


def test_it_starts_a_call_with_its_name_before_its_arguments_end():
    stream = HermesToolCalls.stream()
    assert stream.feed('<tool_call>\n{"name": "get_weather", "arguments": {"ci') == [
        CallStarted(0, "get_weather"),
        Arguments(0, '{"ci'),
    ]
    assert stream.feed('ty": "Paris"}}\n</tool') == [Arguments(0, 'ty": "Paris"}')]
    assert stream.feed("_call>") == []
    assert stream.finish() == []


def test_it_holds_back_only_text_that_could_begin_a_call():
    stream = HermesToolCalls.stream()
    assert stream.feed("it is <b>warm</b> <tool") == [Text("it is <b>warm</b> ")]
    assert stream.feed("box>") == [Text("<toolbox>")]
    assert stream.feed(" <tool_c") == [Text(" ")]
    assert stream.finish() == [Text("<tool_c")]


def test_text_after_a_call_starts_at_its_first_non_whitespace_character():
    content, calls, _ = parsed(f"{CALL}\n\n  It is warm.\n", 2)
    assert (content, calls) == ("It is warm.\n", [WEATHER])


def test_a_block_that_is_no_call_is_text():
    content, calls, _ = parsed("a <tool_call>{not json}</tool_call> b", 4)
    assert (content, calls) == ("a <tool_call>{not json}</tool_call> b", [])


def test_an_unfinished_call_keeps_what_came_of_its_arguments():
    content, calls, _ = parsed('<tool_call>\n{"name": "f", "arguments": {"a": [1, 2', 3)
    assert (content, calls) == ("", [ToolCall("f", '{"a": [1, 2')])
    content, calls, _ = parsed('x <tool_call>\n{"name": "f"', 3)
    assert (content, calls) == ('x <tool_call>\n{"name": "f"', [])


def test_a_long_call_written_arguments_first_is_read_whole_at_its_end():
    arguments = {"text": "x" * 5000, "n": 1}
    block = json.dumps({"arguments": arguments, "name": "f"})
    content, calls, _ = parsed(f"<tool_call>{block}</tool_call><tool_call>{block}</tool_call>", 3)
    assert content == "" and [json.loads(call.arguments) for call in calls] == [arguments, arguments]


def test_text_without_calls_comes_out_as_it_was():
    text = "no calls here, just <html> and </tool_call> and a tag <tool_call"
    assert parsed(text, 7)[:2] == (text, [])


def test_the_structural_tag_holds_an_answer_to_the_named_function_or_any_for_required(tiny_llama_folder):
    import xgrammar
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama_folder)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    functions = [{"name": "get_weather", "parameters": schema}, {"name": "get_time"}]
    good = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    other = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    named = HermesToolCalls.structural_tag(functions[:1], required=False, parallel=True)
    required = HermesToolCalls.structural_tag(functions, required=True, parallel=True)
    for tag, accepted, refused in [
        (named, [good], [other, good.replace('"Paris"', "1"), "text"]),
        (required, [good, other, f"{good}\n{other}"], ["text", good.replace("city", "town")]),
    ]:
        grammar = compile_grammar(tokenizer, len(tokenizer), StructuredOutput.of("structural_tag", tag))
        for text in accepted:
            assert xgrammar.GrammarMatcher(grammar).accept_string(text), text
        for text in refused:
            assert not xgrammar.GrammarMatcher(grammar).accept_string(text), text
    assert parsed(good, 4)[1] == [ToolCall("get_weather", '{"city": "Paris"}')]


def test_it_finds_the_parser_a_config_names():
    assert parser_named(None) is parser_named("") is parser_named("hermes") is HermesToolCalls
    with pytest.raises(UnknownToolParser, match="tool_call_parser 'mistral' is not one of hermes"):
        parser_named("mistral")


CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "weather in paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"a": 1}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "21 C"},
]


def test_a_template_that_renders_tools_gets_them_with_arguments_as_objects():
    messages, tools = template_messages(CONVERSATION, TOOLS, "{% for tool in tools %}{% endfor %}", None)
    assert tools == TOOLS
    assert messages[2]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert CONVERSATION[2]["tool_calls"][0]["function"]["arguments"] == '{"a": 1}'  # the caller's left alone


def test_a_template_without_tools_gets_them_in_the_hermes_form():
    messages, tools = template_messages(CONVERSATION, TOOLS, "{{ messages }}", "hermes")
    assert tools is None
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"].startswith("Be brief.\n\n# Tools")
    assert json.dumps(TOOLS[0]) in messages[0]["content"]
    assert messages[2]["content"] == '<tool_call>\n{"name": "get_weather", "arguments": {"a": 1}}\n</tool_call>'
    assert messages[3]["content"] == "<tool_response>\n21 C\n</tool_response>"
    assert template_messages(CONVERSATION[:2], None, "{{ messages }}", None) == (CONVERSATION[:2], None)


def test_messages_take_null_content_only_beside_tool_calls():
    assert chat_messages(json.dumps(CONVERSATION)) == CONVERSATION
    with pytest.raises(InvalidArgument, match="messages must be a JSON list"):
        chat_messages(json.dumps([{"role": "assistant", "content": None}]))
