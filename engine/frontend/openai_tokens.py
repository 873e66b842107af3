"""POST /tokenize and POST /detokenize, as vLLM serves them: a model's own tokenizer on a prompt or on chat messages
(its chat template), and token ids back to text.

/tokenize takes `model` and `prompt` (`add_special_tokens`, default true) or `messages` (`add_generation_prompt`,
default true; `add_special_tokens`, default false: the template writes its own), and `return_token_strs`; it answers
{"count", "max_model_len", "tokens", "token_strs"} with the ids a generation of that prompt would start from.
/detokenize takes `model` and `tokens` and answers {"prompt"}. OpenAIApp answers both beside /v1, behind the same
credentials, cross-site check and body bound; the model is routed as /v1 routes it (404 when unknown) and must be
served by a backend with a tokenizer (`Tokenizing`: the llm backend), else 400. The tokenizer runs on a worker
thread, so a prompt as long as the body allows costs the event loop nothing.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from engine.errors import InferaError, InvalidArgument
from engine.frontend import openai_fields as fields
from engine.frontend.openai_fields import OpenAIError
from engine.protocol import parse_json_object

if TYPE_CHECKING:
    from engine.serving.lifecycle import ServedVersion
    from engine.serving.server import InferenceServer


@runtime_checkable
class Tokenizing(Protocol):
    """A backend that tokenizes as it generates (engine.backends.llm.LLMBackend)."""

    max_model_len: int

    def tokenize(
        self,
        prompt: str | None = None,
        messages: list[dict[str, str]] | None = None,
        *,
        add_special_tokens: bool | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]: ...

    def detokenize(self, token_ids: list[int]) -> str: ...

    def token_strings(self, token_ids: list[int]) -> list[str]: ...


def tokenizing_backend(served: ServedVersion) -> Tokenizing | None:
    """The backend of a loaded version when it has a tokenizer (its instances share one model), else None."""
    return next((i.backend for i in served.instances if isinstance(i.backend, Tokenizing)), None)


def _tokenizer(server: InferenceServer, body: bytes) -> tuple[dict[str, Any], Tokenizing]:
    """The checked body and the tokenizing backend of the model it names."""
    try:
        document = parse_json_object(body)
    except InferaError as exc:
        raise OpenAIError(exc.message) from None
    model, route = fields.model_route(server, document)
    backend = tokenizing_backend(route.served)
    if backend is None:
        raise OpenAIError(f"model '{model}' has no tokenizer (only the llm backend's models have one)", param="model")
    return document, backend


async def tokenize(server: InferenceServer, body: bytes) -> bytes:
    """POST /tokenize: the prompt's or the messages' token ids."""
    document, backend = _tokenizer(server, body)
    messages = None
    prompt = document.get("prompt")
    if document.get("messages") is not None:
        messages = [{"role": role, "content": text} for role, text in fields.messages(document["messages"])]
    elif not isinstance(prompt, str):
        raise OpenAIError("'prompt' must be a string, or 'messages' a list of messages", param="prompt")
    special = fields.boolean(document, "add_special_tokens", default=messages is None)
    generation_prompt = fields.boolean(document, "add_generation_prompt", default=True)
    strings = fields.boolean(document, "return_token_strs")

    def run() -> dict[str, Any]:
        ids = backend.tokenize(prompt, messages, add_special_tokens=special, add_generation_prompt=generation_prompt)
        shown = backend.token_strings(ids) if strings else None
        return {"count": len(ids), "max_model_len": backend.max_model_len, "tokens": ids, "token_strs": shown}

    try:
        answer = await asyncio.to_thread(run)
    except InvalidArgument as exc:
        raise OpenAIError(exc.message, param="messages" if messages is not None else "prompt") from None
    return orjson.dumps(answer)


async def detokenize(server: InferenceServer, body: bytes) -> bytes:
    """POST /detokenize: the text of the token ids."""
    document, backend = _tokenizer(server, body)
    ids = fields.token_ids(document.get("tokens"))
    try:
        text = await asyncio.to_thread(backend.detokenize, ids)
    except InvalidArgument as exc:
        raise OpenAIError(exc.message, param="tokens") from None
    return orjson.dumps({"prompt": text})
