"""Tool calls on /v1/chat/completions: `tools`, `tool_choice` and `parallel_tool_calls` checked, the conversation's
tool calls and tool results checked, and the answer's text turned into OpenAI's `tool_calls`, whole or streamed.

`tools`: 1 to MAX_TOOLS functions ({"type": "function", "function": {"name", "description"?, "parameters"?,
"strict"?}}), each name matching NAME (and given once), its parameters a valid JSON schema (its dialect's
metaschema, by jsonschema), all of them at most MAX_TOOLS_CHARS of JSON nested at most MAX_DEPTH deep.
`tool_choice`: "none" (the model is not shown the tools and answers text), "auto" (the default: the chat template
shows the tools and the model's `tool_call_parser` family reads calls out of its text), "required" or {"type":
"function", "function": {"name"}} (a name not among the tools is a 400 naming it): the answer is then held, while it
is decoded, to the family's call format with each function's JSON schema as its arguments (a structural tag,
engine/llm/structured.py), so the arguments always parse and validate; only a model whose backend holds an answer to
a grammar takes those (another is a 400), and no other constraint (`response_format`, ...) may be given with them.

An answer with calls has `message.tool_calls` [{"id": "call_...", "type": "function", "function": {"name",
"arguments": JSON text}}], `content` null unless the model wrote text beside them, and finish_reason "tool_calls"
(a named function's too); streamed, a call's first delta carries its index, id, type and name, the next ones its
arguments' fragments, and text that could begin a call is held back until it is decided (engine/llm/tool_parsers.py).
With `parallel_tool_calls: false` an answer has one call at most: `required` is held to one, and under `auto` a
model's second call is left out.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.frontend import openai_fields as fields
from engine.frontend import openai_structured
from engine.frontend.openai_fields import OpenAIError
from engine.llm.structured import InvalidStructuredOutput, StructuredOutput
from engine.llm.tool_parsers import (
    TOOL_PARSER,
    Arguments,
    CallStarted,
    Event,
    HermesStream,
    HermesToolCalls,
    Text,
    UnknownToolParser,
    parser_named,
    whole,
)

if TYPE_CHECKING:
    from engine.config.model_config import ModelConfig
    from engine.serving.lifecycle import ServedVersion

NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
MAX_TOOLS = 128  # OpenAI's
MAX_TOOLS_CHARS = 256 * 1024  # the tools' JSON, all together
MAX_DEPTH = 64  # objects and lists nested in the tools (their schemas)
MAX_DESCRIPTION_CHARS = 8192
MAX_TOOL_CALLS = 128  # in one assistant message of the conversation
MAX_ID_CHARS = 256
CHOICES = ("none", "auto", "required")


@dataclass
class ToolChoice:
    """A request's tools and what it lets the model do with them."""

    tools: list[dict[str, Any]]
    choice: str  # "auto", "required" or "function"
    function: str | None  # the named function
    parallel: bool
    parser: type[HermesToolCalls]
    renders: bool  # the model renders messages with its own chat template: it gets the tools
    constraint: StructuredOutput | None = None  # required or a named function: the calls the answer is held to
    streams: dict[int, HermesStream] = field(default_factory=dict)  # a streamed answer's parser, per choice
    calls: dict[int, int] = field(default_factory=dict)  # a streamed answer's calls so far, per choice

    def options(self) -> dict[str, Any]:
        """What goes to the model with the sampling settings."""
        options: dict[str, Any] = {"tools": self.tools} if self.renders else {}
        if self.constraint is not None:
            options["structured_outputs"] = self.constraint.as_options()
        return options

    async def check(self, served: ServedVersion, model: str) -> None:
        """Compile the calls' grammar with the model's backend before any request starts (400 when it cannot)."""
        if self.constraint is not None:
            await openai_structured.check(served, model, "tool_choice", self.constraint)

    def answer(self, text: str, finish_reason: str) -> tuple[dict[str, Any], str]:
        """The message of a whole answer and its finish_reason."""
        stream = self.parser.stream()
        content, calls = whole(self._allowed([*stream.feed(text), *stream.finish()]))
        if not calls:
            return {"role": "assistant", "content": text}, finish_reason
        message: dict[str, Any] = {"role": "assistant", "content": content if content.strip() else None}
        message["tool_calls"] = [_call(call.name, call.arguments) for call in calls]
        return message, _finish(finish_reason)

    def _allowed(self, events: list[Event]) -> list[Event]:
        """Without parallel calls, the first call only: a second one (and its arguments) is left out."""
        if self.parallel:
            return events
        return [event for event in events if isinstance(event, Text) or event.index == 0]

    def delta(self, index: int, text: str | None, finish: str | None) -> tuple[dict[str, Any], str | None]:
        """The delta a streamed piece of choice `index` makes (content, tool_calls or nothing) and its
        finish_reason (`finish`, on the last piece)."""
        stream = self.streams.setdefault(index, self.parser.stream())
        events = stream.feed(text) if text else []
        if finish is not None:
            events += stream.finish()
        events = self._allowed(events)
        delta: dict[str, Any] = {}
        content = "".join(event.text for event in events if isinstance(event, Text))
        if content:
            delta["content"] = content
        calls: list[dict[str, Any]] = []
        for event in events:
            if isinstance(event, CallStarted):
                calls.append({"index": event.index, **_call(event.name, "")})
                self.calls[index] = event.index + 1
            elif isinstance(event, Arguments):
                if calls and calls[-1]["index"] == event.index:
                    calls[-1]["function"]["arguments"] += event.text
                else:
                    calls.append({"index": event.index, "function": {"arguments": event.text}})
        if calls:
            delta["tool_calls"] = calls
        if finish is not None and self.calls.get(index):
            finish = _finish(finish)
        return delta, finish


def requested(
    document: dict[str, Any], config: ModelConfig, renders: bool, structured: tuple[str, StructuredOutput] | None
) -> ToolChoice | None:
    """The request's tools and tool_choice, checked; None when it gives none or tool_choice is "none"."""
    given = document.get("tools")
    choice = document.get("tool_choice")
    parallel = fields.boolean(document, "parallel_tool_calls", True)
    if given is None:
        if choice is not None and choice != "none":
            raise OpenAIError("'tool_choice' is only allowed when 'tools' are given", param="tool_choice")
        return None
    tools = _tools(given)
    names = [tool["function"]["name"] for tool in tools]
    function = None
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        function = _named(choice)
        if function not in names:
            raise OpenAIError(
                f"'tool_choice' names function '{function}', which is not among 'tools' ({', '.join(names)})",
                param="tool_choice",
            )
        choice = "function"
    elif choice not in CHOICES:
        raise OpenAIError(
            '\'tool_choice\' must be none, auto, required or {"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if choice == "none":
        return None
    try:
        parser = parser_named(config.parameters.get(TOOL_PARSER))
    except UnknownToolParser as exc:
        raise OpenAIError(f"model '{config.name}': its config's {exc}", 500, "server_error") from None
    chosen = ToolChoice(tools, choice, function, parallel, parser, renders)
    if choice in ("required", "function"):
        if structured is not None:
            raise OpenAIError(
                f"'tool_choice' {choice if function is None else repr(function)} and '{structured[0]}' both "
                "constrain the answer: give one of them",
                param="tool_choice",
            )
        chosen.constraint = _constraint(tools, function, parallel, parser)
    return chosen


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise OpenAIError("'tools' must be a non-empty list of functions", param="tools")
    if len(value) > MAX_TOOLS:
        raise OpenAIError(f"'tools' may hold at most {MAX_TOOLS} functions, got {len(value)}", param="tools")
    if _depth(value) > MAX_DEPTH:
        raise OpenAIError(f"'tools' may nest at most {MAX_DEPTH} levels of objects and lists", param="tools")
    if len(json.dumps(value)) > MAX_TOOLS_CHARS:
        raise OpenAIError(f"'tools' may take at most {MAX_TOOLS_CHARS} characters of JSON", param="tools")
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
            raise OpenAIError(f'{where} must be {{"type": "function", "function": {{...}}}}', param="tools")
        function = tool["function"]
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise OpenAIError(
                f"{where}.function.name must be 1 to 64 letters, digits, underscores or dashes",
                param="tools",
            )
        if name in seen:
            raise OpenAIError(f"{where}.function.name '{name}' is given twice", param="tools")
        seen.add(name)
        checked: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None:
            if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
                raise OpenAIError(
                    f"{where}.function.description must be a string of at most {MAX_DESCRIPTION_CHARS} characters",
                    param="tools",
                )
            checked["description"] = description
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise OpenAIError(f"{where}.function.parameters must be a JSON schema object", param="tools")
            reason = _schema_fault(json.dumps(parameters, sort_keys=True))
            if reason is not None:
                raise OpenAIError(f"{where}.function.parameters is not a valid JSON schema: {reason}", param="tools")
            checked["parameters"] = parameters
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise OpenAIError(f"{where}.function.strict must be true or false", param="tools")
            checked["strict"] = strict
        tools.append({"type": "function", "function": checked})
    return tools


@functools.lru_cache(maxsize=256)
def _schema_fault(schema: str) -> str | None:
    """Why a schema (as JSON text) breaks the JSON Schema metaschema of its dialect, or None; cached, since a
    client sends the same tools again and again."""
    import jsonschema

    document = json.loads(schema)
    try:
        jsonschema.validators.validator_for(document).check_schema(document)
    except jsonschema.SchemaError as exc:
        return exc.message[:300]
    return None


def _depth(value: Any) -> int:
    """How deep objects and lists nest in `value` (walked without recursion: a deep body costs no stack)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((child, depth + 1) for child in children)
    return deepest


def _named(choice: dict[str, Any]) -> str:
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise OpenAIError(
            '\'tool_choice\' must be none, auto, required or {"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    return name


def _constraint(
    tools: list[dict[str, Any]], function: str | None, parallel: bool, parser: type[HermesToolCalls]
) -> StructuredOutput:
    """The structural tag of the calls allowed: the named function's, or any of the tools' (required)."""
    chosen = [tool["function"] for tool in tools if function is None or tool["function"]["name"] == function]
    try:
        for index, tool in enumerate(tools):
            if tool["function"] in chosen and "parameters" in tool["function"]:
                name = f"tools[{index}].function.parameters"
                StructuredOutput.of("json", tool["function"]["parameters"], name=name)
        tag = parser.structural_tag(chosen, required=function is None, parallel=parallel)
        strict = all(tool.get("strict", False) for tool in chosen)
        return StructuredOutput.of("structural_tag", tag, strict=strict, name="tools")
    except InvalidStructuredOutput as exc:
        raise OpenAIError(exc.message, param="tools") from None


def conversation(value: Any) -> list[dict[str, Any]]:
    """`messages` for a model that renders its own chat template: each {role, content}, an assistant's with its
    `tool_calls` (content null then allowed), a tool result's with its `tool_call_id`; checked and bounded."""
    checked = []
    for index, (message, role) in enumerate(_messages(value)):
        where = f"messages[{index}]"
        content = message.get("content")
        calls = message.get("tool_calls") if role == "assistant" else None
        if not isinstance(content, str) and not (content is None and calls):
            raise OpenAIError(f"{where} must be an object with a string 'content'", param="messages")
        entry: dict[str, Any] = {"role": role, "content": content}
        if calls:
            entry["tool_calls"] = _history_calls(calls, where)
        if role == "tool":
            entry["tool_call_id"] = _identifier(message.get("tool_call_id"), f"{where}.tool_call_id")
        if message.get("name") is not None:
            entry["name"] = _identifier(message.get("name"), f"{where}.name")
        checked.append(entry)
    return checked


def _messages(value: Any) -> list[tuple[dict[str, Any], str]]:
    if not isinstance(value, list) or not value:
        raise OpenAIError("'messages' must be a non-empty list", param="messages")
    if len(value) > fields.MAX_MESSAGES:
        raise OpenAIError(
            f"'messages' may hold at most {fields.MAX_MESSAGES} messages, got {len(value)}", param="messages"
        )
    found = []
    for index, message in enumerate(value):
        role = message.get("role", "user") if isinstance(message, dict) else None
        if not isinstance(role, str) or not 0 < len(role) <= fields.MAX_ROLE_CHARS:
            raise OpenAIError(
                f"messages[{index}] must be an object whose 'role' is a string of 1 to {fields.MAX_ROLE_CHARS} "
                "characters",
                param="messages",
            )
        found.append((message, role))
    return found


def _history_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
        raise OpenAIError(f"{where}.tool_calls must be a list of at most {MAX_TOOL_CALLS} calls", param="messages")
    checked = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            raise OpenAIError(
                f'{where}.tool_calls[{number}] must be {{"id", "type": "function", "function": {{"name", '
                '"arguments": a JSON string}}',
                param="messages",
            )
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise OpenAIError(f"{where}.tool_calls[{number}].function.name is not a function name", param="messages")
        identifier = _identifier(call.get("id"), f"{where}.tool_calls[{number}].id")
        checked.append(
            {"id": identifier, "type": "function", "function": {"name": name, "arguments": function["arguments"]}}
        )
    return checked


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise OpenAIError(f"{where} must be a string of 1 to {MAX_ID_CHARS} characters", param="messages")
    return value


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _finish(reason: str) -> str:
    """An answer that made calls and stopped by itself ends "tool_calls"; one cut short stays "length"."""
    return "tool_calls" if reason == "stop" else reason
