"""Structured outputs on /v1/completions and /v1/chat/completions: what a request asks its answer to follow.

OpenAI's `response_format` ({"type": "text"}, {"type": "json_object"}, {"type": "json_schema", "json_schema":
{"name", "schema", "strict"}}), vLLM's current `structured_outputs` object ({"json"}, {"json_object"}, {"regex"},
{"choice"}, {"grammar"}) and vLLM's earlier extra fields `guided_json`, `guided_regex`, `guided_choice`,
`guided_grammar`; at most one of them. Each is checked here (engine/llm/structured.py's rules) and then compiled by
the model's backend on a worker thread before any request starts, so a schema, regex or grammar the library cannot
compile is a 400 naming the field and the library's reason, streamed or not; a model whose backend holds no answer
to a grammar (only the llm backend's do) is a 400 naming the field. Nothing asked for is ever silently ignored:
`guided_decoding_backend` and `guided_whitespace_pattern` (vLLM's, now gone there too) are refused.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine.errors import InvalidArgument
from engine.frontend.openai_fields import OpenAIError
from engine.llm.structured import StructuredOutput

if TYPE_CHECKING:
    from engine.serving.lifecycle import ServedVersion

GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice", "guided_grammar": "grammar"}
REFUSED = ("guided_decoding_backend", "guided_whitespace_pattern")
MAX_NAME_CHARS = 64


@runtime_checkable
class Constraining(Protocol):
    """A backend that holds its answers to a grammar (engine.backends.llm.LLMBackend)."""

    def compile_structured(self, value: object) -> Any: ...


def requested(document: dict[str, Any]) -> tuple[str, StructuredOutput] | None:
    """The field that constrains the answer and its constraint, checked; None when none does."""
    for name in REFUSED:
        if document.get(name) is not None:
            raise OpenAIError(f"'{name}' is not supported: this server has one grammar backend", param=name)
    found: list[tuple[str, StructuredOutput]] = []
    try:
        response_format = _response_format(document.get("response_format"))
        if response_format is not None:
            found.append(("response_format", response_format))
        if document.get("structured_outputs") is not None:
            found.append(("structured_outputs", StructuredOutput.from_options(document["structured_outputs"])))
        for name, kind in GUIDED.items():
            if document.get(name) is not None:
                found.append((name, StructuredOutput.of(kind, document[name], name=name)))
    except InvalidArgument as exc:
        raise OpenAIError(exc.message, param=_top(getattr(exc, "field", None))) from None
    if len(found) > 1:
        raise OpenAIError(
            f"'{found[1][0]}' and '{found[0][0]}' both constrain the answer: give one of them", param=found[1][0]
        )
    return found[0] if found else None


def _response_format(value: Any) -> StructuredOutput | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return StructuredOutput.of("json_object", True, name="response_format")
    if kind != "json_schema":
        raise OpenAIError(
            "'response_format' must be an object whose 'type' is text, json_object or json_schema",
            param="response_format",
        )
    described = value.get("json_schema")
    if not isinstance(described, dict):
        raise OpenAIError("'response_format.json_schema' must be an object", param="response_format")
    name = described.get("name")
    if name is not None and (not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS):
        raise OpenAIError(
            f"'response_format.json_schema.name' must be a string of 1 to {MAX_NAME_CHARS} characters",
            param="response_format",
        )
    strict = described.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise OpenAIError("'response_format.json_schema.strict' must be true or false", param="response_format")
    schema = described.get("schema")
    if schema is None:
        raise OpenAIError("'response_format.json_schema.schema' is required", param="response_format")
    return StructuredOutput.of("json", schema, strict=bool(strict), name="response_format.json_schema.schema")


def _top(field: str | None) -> str | None:
    return field.split(".", 1)[0] if field else None


async def check(served: ServedVersion, model: str, name: str, spec: StructuredOutput) -> None:
    """Compile the constraint with the model's backend, off the event loop (its cache keeps it for the requests);
    400 naming `name` when the model takes none or the library cannot compile it."""
    backend = next((i.backend for i in served.instances if isinstance(i.backend, Constraining)), None)
    if backend is None:
        raise OpenAIError(
            f"'{name}' is not supported by model '{model}': only the llm backend's models hold an answer to a "
            "schema, regex, choice or grammar",
            param=name,
        )
    try:
        await asyncio.to_thread(backend.compile_structured, spec)
    except InvalidArgument as exc:
        raise OpenAIError(exc.message, param=name) from None
