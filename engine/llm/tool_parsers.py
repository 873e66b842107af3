"""Tool calls in a model's text, per chat-template family: the parser registry (`tool_call_parser` in a model's
config chooses one; "hermes" is the default).

A family knows three things of its format: how calls appear in generated text (`ToolCallStream`: fed piece by
piece, it gives back text, a call's start with its name, and its arguments in fragments, holding back only text
that could still begin a call), the structural tag that makes a model write calls in that format (for
`tool_choice` "required" or a named function: engine/llm/structured.py compiles it with each function's JSON
schema, so the arguments always parse), and how a conversation with tools, tool calls and tool results reads to a
model whose chat template does not render tools (`plain_messages`).

Hermes (Qwen 2.5 and 3, SmolLM2, Hermes 2 and 3):
`<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>`, any number of them, text
around them being the answer's content; tool results go back in `<tool_response>` inside a user turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidArgument

DEFAULT_PARSER = "hermes"
TOOL_PARSER = "tool_call_parser"  # the model config parameter that names the family
MAX_HEAD_CHARS = 1024  # a block whose call has not started by then is read whole at its end


@dataclass(frozen=True, slots=True)
class Text:
    """Text of the answer outside any call."""

    text: str


@dataclass(frozen=True, slots=True)
class CallStarted:
    """Call `index` (0, 1, ... in the answer) starts: the function's name."""

    index: int
    name: str


@dataclass(frozen=True, slots=True)
class Arguments:
    """A fragment of call `index`'s arguments (their JSON text, in order)."""

    index: int
    text: str


Event = Text | CallStarted | Arguments


@dataclass(frozen=True, slots=True)
class ToolCall:
    name: str
    arguments: str  # JSON text


def whole(events: Iterable[Event]) -> tuple[str, list[ToolCall]]:
    """A whole answer's content and its calls, from its events."""
    content: list[str] = []
    names: list[str] = []
    arguments: list[list[str]] = []
    for event in events:
        if isinstance(event, Text):
            content.append(event.text)
        elif isinstance(event, CallStarted):
            names.append(event.name)
            arguments.append([])
        else:
            arguments[event.index].append(event.text)
    return "".join(content), [ToolCall(n, "".join(a)) for n, a in zip(names, arguments, strict=True)]


def _held(text: str, tag: str) -> int:
    """How many characters at the end of `text` could begin `tag` (held until the next piece decides)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


class HermesStream:
    """Hermes calls read incrementally: `feed(piece)` and `finish()` give events.

    Outside a call, text goes out at once but for a tail that could begin `<tool_call>`. Inside one, the call
    starts (its name) as soon as `{"name": "...", "arguments": ` has come, and its arguments object then goes out
    as it comes, to its closing brace; a call written another way (arguments first) goes out whole at
    `</tool_call>`, and a block that is no call at all goes out as the text it was. Text after a call starts at
    its first non-whitespace character."""

    START = "<tool_call>"
    END = "</tool_call>"
    _HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)')

    def __init__(self) -> None:
        self.buffer = ""
        self.inside = False  # within <tool_call> ... </tool_call>
        self.calls = 0
        self.streaming = False  # the current call's arguments are going out as they come
        self.depth = 0  # of the arguments' braces and brackets
        self.in_string = False
        self.escaped = False
        self.done_arguments = False
        self.after_call = False  # a call has just ended: whitespace after it is dropped
        self.searched = 0  # where the search for </tool_call> in a block goes on

    def feed(self, piece: str) -> list[Event]:
        self.buffer += piece
        events: list[Event] = []
        while True:
            before = (self.buffer, self.inside, self.streaming)
            if not self.inside:
                self._outside(events)
            elif self.streaming:
                self._arguments(events)
            else:
                self._head(events)
            if (self.buffer, self.inside, self.streaming) == before:
                return events

    def finish(self) -> list[Event]:
        """What is still held at the end: text that never became a call, or the text of an unfinished block."""
        events: list[Event] = []
        if self.inside and not self.streaming:
            events.append(Text(self.START + self.buffer))
        elif not self.inside and self.buffer:
            events.append(Text(self.buffer))
        self.buffer = ""
        return events

    def _outside(self, events: list[Event]) -> None:
        if self.after_call:  # text after a call starts at its first non-whitespace character
            self.buffer = self.buffer.lstrip()
            if not self.buffer:
                return
            self.after_call = False
        at = self.buffer.find(self.START)
        if at >= 0:
            if at:
                events.append(Text(self.buffer[:at]))
            self.buffer = self.buffer[at + len(self.START) :]
            self.inside, self.searched = True, 0
            return
        keep = _held(self.buffer, self.START)
        if len(self.buffer) > keep:
            events.append(Text(self.buffer[: len(self.buffer) - keep]))
            self.buffer = self.buffer[len(self.buffer) - keep :]

    def _head(self, events: list[Event]) -> None:
        """A call's start, matched while the block is short enough to hold one; else the block whole at its end
        (each piece searched once: a long block costs its length, not its length squared)."""
        match = self._HEAD.match(self.buffer) if len(self.buffer) <= MAX_HEAD_CHARS else None
        if match is not None:
            events.append(CallStarted(self.calls, json.loads(match.group(1))))
            self.buffer = self.buffer[match.end() :]
            self.streaming, self.depth, self.in_string, self.escaped, self.done_arguments = True, 0, False, False, False
            return
        end = self.buffer.find(self.END, self.searched)
        if end < 0:
            self.searched = max(0, len(self.buffer) - len(self.END) + 1)
            return
        block, self.buffer = self.buffer[:end], self.buffer[end + len(self.END) :]
        self.inside, self.searched = False, 0
        call = _call_of(block)
        if call is None:
            events.append(Text(self.START + block + self.END))
            return
        events += [CallStarted(self.calls, call.name), Arguments(self.calls, call.arguments)]
        self.calls += 1
        self.after_call = True

    def _arguments(self, events: list[Event]) -> None:
        """The arguments object to its closing brace, then anything up to </tool_call> skipped."""
        if self.done_arguments:
            end = self.buffer.find(self.END)
            if end < 0:
                self.buffer = self.buffer[-(len(self.END) - 1) :]
                return
            self._end_call(end)
            return
        taken = 0
        for position, character in enumerate(self.buffer):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif character == "\\":
                    self.escaped = True
                elif character == '"':
                    self.in_string = False
            elif character == '"':
                self.in_string = True
            elif character in "{[":
                self.depth += 1
            elif character in "}]":
                self.depth -= 1
                if self.depth == 0:
                    taken = position + 1
                    self.done_arguments = True
                    break
            elif character == "<" and self.buffer.startswith(self.END, position):
                if position:  # the block ends inside its arguments: they end here, unfinished
                    events.append(Arguments(self.calls, self.buffer[:position]))
                self._end_call(position)
                return
            taken = position + 1
        if not self.done_arguments and not self.in_string:
            taken -= _held(self.buffer[:taken], self.END)  # a tail that could begin </tool_call>: held
        if taken:
            events.append(Arguments(self.calls, self.buffer[:taken]))
            self.buffer = self.buffer[taken:]

    def _end_call(self, end: int) -> None:
        self.buffer = self.buffer[end + len(self.END) :]
        self.inside = self.streaming = False
        self.calls += 1
        self.after_call = True


def _call_of(block: str) -> ToolCall | None:
    """A block's call when it is one JSON object with a name and arguments (or parameters); else None."""
    try:
        document = json.loads(block)
    except ValueError:
        return None
    if not isinstance(document, dict) or not isinstance(document.get("name"), str):
        return None
    arguments = document.get("arguments", document.get("parameters", {}))
    if isinstance(arguments, str):
        return ToolCall(document["name"], arguments)
    return ToolCall(document["name"], json.dumps(arguments, ensure_ascii=False))


class HermesToolCalls:
    """The Hermes family: its stream parser, its structural tag, its plain rendering of a conversation."""

    name = "hermes"
    SYSTEM = (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
        "function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\nFor each function "
        "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
        '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
    )

    @staticmethod
    def stream() -> HermesStream:
        return HermesStream()

    @staticmethod
    def structural_tag(functions: Sequence[dict[str, Any]], *, required: bool, parallel: bool) -> dict[str, Any]:
        """The calls `functions` allow ({"name", "parameters"} each), nothing else: one call when `parallel` is
        false or only one function is named (`required` false), else one or more separated by a newline."""
        tags = [
            {
                "type": "tag",
                "begin": f'<tool_call>\n{{"name": {json.dumps(function["name"])}, "arguments": ',
                "content": {"type": "json_schema", "json_schema": function.get("parameters") or {"type": "object"}},
                "end": "}\n</tool_call>",
            }
            for function in functions
        ]
        if not required:
            return {"type": "structural_tag", "format": tags[0]}
        format_ = {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True}
        format_["stop_after_first"] = not parallel
        return {"type": "structural_tag", "format": format_}

    @classmethod
    def plain_messages(cls, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[dict]:
        """The conversation for a template that renders no tools: the tools in the system message, calls as
        `<tool_call>` text of the assistant's, results as `<tool_response>` text of the user's."""
        plain: list[dict[str, Any]] = []
        if tools:
            described = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
            system = cls.SYSTEM.format(tools=described)
            if messages and messages[0].get("role") == "system":
                system = f"{messages[0].get('content') or ''}\n\n{system}".lstrip()
                messages = messages[1:]
            plain.append({"role": "system", "content": system})
        for message in messages:
            content = message.get("content") or ""
            if message.get("role") == "tool":
                plain.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
                continue
            for call in message.get("tool_calls") or ():
                function = call.get("function", call)
                arguments = function.get("arguments", {})
                shown = {"name": function.get("name"), "arguments": arguments}
                content += f"\n<tool_call>\n{json.dumps(shown, ensure_ascii=False)}\n</tool_call>"
            plain.append({"role": message.get("role", "user"), "content": content.lstrip("\n")})
        return plain


PARSERS: dict[str, type[HermesToolCalls]] = {"hermes": HermesToolCalls}


class UnknownToolParser(KeyError):
    """A `tool_call_parser` this server does not have; `name` is it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"tool_call_parser '{self.name}' is not one of {', '.join(sorted(PARSERS))}"


def parser_named(name: str | None) -> type[HermesToolCalls]:
    """The family named `name` (None or blank: the default); UnknownToolParser otherwise."""
    key = (name or "").strip() or DEFAULT_PARSER
    try:
        return PARSERS[key]
    except KeyError:
        raise UnknownToolParser(key) from None


def chat_messages(text: str) -> list[dict[str, Any]]:
    """The `messages` input: a JSON list of {role, content} objects (content null in an assistant's tool calls)."""
    try:
        conversation = json.loads(text)
    except ValueError:
        conversation = None
    if not isinstance(conversation, list) or not all(
        isinstance(m, dict)
        and isinstance(m.get("role"), str)
        and (isinstance(m.get("content"), str) or (m.get("content") is None and m.get("tool_calls")))
        for m in conversation
    ):
        raise InvalidArgument("messages must be a JSON list of {role, content} objects")
    return conversation


def tools_of(value: Any) -> list[dict[str, Any]] | None:
    """The tools a chat template renders: a list of OpenAI's tool objects, or its JSON text (generate's)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidArgument("tools must be a JSON list of tool objects") from None
    if value is not None and (not isinstance(value, list) or not all(isinstance(t, dict) for t in value)):
        raise InvalidArgument("tools must be a list of tool objects")
    return value or None


def template_messages(
    messages: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None, template: str, parser: str | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The conversation and tools to render with a chat template: as they are (a call's JSON arguments as an
    object, as templates write them) when the template renders tools, else in the family's plain form."""
    if not tools and not any(m.get("tool_calls") or m.get("role") == "tool" for m in messages):
        return messages, None
    rendered = [
        dict(m, tool_calls=[_with_object_arguments(call) for call in m["tool_calls"]]) if m.get("tool_calls") else m
        for m in messages
    ]
    if "tools" not in template and "tool_calls" not in template:
        return parser_named(parser).plain_messages(rendered, tools or ()), None
    return rendered, list(tools) if tools else None


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
        return call
    try:
        arguments = json.loads(function["arguments"])
    except ValueError:
        return call
    return dict(call, function=dict(function, arguments=arguments))
