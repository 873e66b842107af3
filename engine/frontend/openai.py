"""OpenAI-compatible endpoints over text-generating models: GET /v1/models, POST /v1/completions and
POST /v1/chat/completions, streamed (`stream: true`, server-sent chunks then `data: [DONE]`) or not; POST
/v1/embeddings over models that embed (openai_embeddings.py); and vLLM's POST /tokenize and /detokenize.

A model is a text generator when its config names its text tensors: `parameters { key: "openai_text_input" ... }`
and `openai_text_output` (BYTES). The prompt goes to the text input; for chat, a model whose config also names an
`openai_messages_input` (the `llm` backend) gets the messages there as JSON and renders them with its own chat
template, any other gets them as "role: content" lines and a last "assistant:" line. max_tokens, temperature, top_p
and seed go to inputs of those names when the model has them, and as JSON to a `sampling_parameters` input when it
has one; a `stream` input is set to true, so each response is one piece of text (a token). Stop strings and
max_tokens (when none is given, for chat, INFERA_OPENAI_MAX_TOKENS) end the text here whatever the model does.
Usage and finish_reason are the model's own when its last response carries them (`prompt_tokens`,
`completion_tokens`, `cached_tokens` as usage.prompt_tokens_details.cached_tokens, `finish_reason`); otherwise a
completion's tokens are counted as the model's responses, and a prompt's as its characters.

`n` choices (up to openai_fields.MAX_CHOICES) are n requests to the model, choice i seeded `seed + i`, read side by
side (openai_choices.py); streamed chunks carry their choice's index, and usage counts the prompt once and every
choice's completion tokens. Logprobs (a completion's `logprobs: k`, a chat's `logprobs: true` and `top_logprobs:
k`) are asked of a model whose config names an `openai_logprobs_output` (the llm backend computes them from its
logits) and written in OpenAI's shapes (openai_logprobs.py); any other model answers 400 naming `logprobs`.
POST /tokenize and /detokenize (vLLM's) use a model's own tokenizer (openai_tokens.py). `priority` (vLLM's: a whole
number, lower served earlier, 0 by default) goes to the model with the sampling settings (the llm backend's
scheduler admits, decodes and preempts by it). The caller's token budgets (openai_budgets.py) are checked and
reserved before any request starts (embeddings' inputs too): a max_tokens above its ceiling is a 400, a budget spent a
429 with Retry-After.
`response_format` (json_object, json_schema) and vLLM's `structured_outputs` and `guided_*` fields
hold the answer to a grammar (openai_structured.py): checked and compiled by the model's backend before any
request starts, then sent to the model as `structured_outputs` with the sampling settings. `cache_salt` (vLLM's)
goes to the model with the sampling settings; the caller (its token, user or address, as /v2 counts it) goes
with each request, so the llm backend keeps its prefix cache per caller.

The same API tokens as /v2 are checked (`Authorization: Bearer <key>`) on every path here, before the body is read; a
body is at most INFERA_OPENAI_MAX_BODY_BYTES, and every field it carries is checked by type, range and length
(openai_fields.py) before any work is done for it.

`tools` and `tool_choice` on chat completions (openai_tools.py): the model's chat template gets the tools, and its
text is read as tool calls (its config's `tool_call_parser`); `required` or a named function hold the answer to
the functions' schemas while it is decoded.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.errors import InferaError
from engine.frontend import openai_budgets, openai_embeddings, openai_structured, openai_tokens, openai_tools
from engine.frontend import openai_fields as fields
from engine.frontend.caller_limits import caller_key
from engine.frontend.cross_site import check_same_origin
from engine.frontend.generate import StreamReply
from engine.frontend.handlers import Reply
from engine.frontend.http import ASGIApp, Authenticate, Receive, Scope, Send, read_body, send_reply, send_stream
from engine.frontend.openai_choices import Choice, Piece, interleaved, whole
from engine.frontend.openai_fields import OpenAIError
from engine.frontend.openai_logprobs import chat_logprobs, completion_logprobs
from engine.llm.budgets import BudgetGate
from engine.protocol import parse_json_object
from engine.serving.admission import ANONYMOUS, Principal
from engine.types import InferenceRequest, current_caller

if TYPE_CHECKING:
    from engine.config.model_config import ModelConfig
    from engine.serving.lifecycle import ServedVersion
    from engine.serving.server import InferenceServer

TEXT_INPUT = "openai_text_input"
TEXT_OUTPUT = "openai_text_output"
MESSAGES_INPUT = "openai_messages_input"
LOGPROBS_OUTPUT = "openai_logprobs_output"
SAMPLING_INPUTS = {"max_tokens": np.int32, "temperature": np.float32, "top_p": np.float32, "seed": np.int64}
TOKEN_PATHS = ("/tokenize", "/detokenize")  # vLLM's, beside /v1
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
EVENT_STREAM = b"text/event-stream; charset=utf-8"
DONE = b"data: [DONE]\n\n"
PRIORITY = (-(2**31), 2**31 - 1)


def is_text_generator(config: ModelConfig) -> bool:
    return bool(config.parameters.get(TEXT_INPUT) and config.parameters.get(TEXT_OUTPUT))


def list_models(server: InferenceServer) -> bytes:
    """GET /v1/models: every ready model that generates text (with its max_model_len when it has a tokenizer) or
    embeds."""
    data = []
    for served in sorted(server.served_versions(), key=lambda s: (s.name, s.version)):
        listed = is_text_generator(served.config) or openai_embeddings.is_embedding_model(served.config)
        if listed and served.name not in {d["id"] for d in data}:
            if server.model_ready(served.name):
                card = {"id": served.name, "object": "model", "created": 0, "owned_by": "infera"}
                if (backend := openai_tokens.tokenizing_backend(served)) is not None:
                    card["max_model_len"] = backend.max_model_len
                data.append(card)
    return orjson.dumps({"object": "list", "data": data})


def chat_prompt(messages: Any) -> str:
    """The messages as one prompt: a "role: content" line each, then "assistant:" for the answer to follow."""
    return "\n".join(f"{role}: {content}" for role, content in fields.messages(messages)) + "\nassistant:"


class Completion:
    """One /v1/completions or /v1/chat/completions call: the checked request, then its answer or its chunks."""

    def __init__(self, server: InferenceServer, body: bytes, chat: bool) -> None:
        try:
            document = parse_json_object(body)
        except InferaError as exc:
            raise OpenAIError(exc.message) from None
        self.chat = chat
        self.model, self.route = fields.model_route(server, document)  # the one version it runs on, chosen once
        self.served: ServedVersion = self.route.served
        config = self.served.config
        if not is_text_generator(config):
            raise OpenAIError(
                f"model '{self.model}' does not generate text: its config names no '{TEXT_INPUT}' and "
                f"'{TEXT_OUTPUT}' parameters",
                param="model",
            )
        self.messages: str | None = None  # the messages as JSON, for a model that renders its own chat template
        if chat and config.parameters.get(MESSAGES_INPUT):
            conversation = openai_tools.conversation(document.get("messages"))  # tool calls and results too
            self.messages = self.prompt = json.dumps(conversation)
        elif chat:
            self.prompt = chat_prompt(document.get("messages"))
        else:
            prompt = document.get("prompt", "")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise OpenAIError("'prompt' must be a string (one prompt per request)", param="prompt")
            self.prompt = prompt
        self.stream = _checked_fields(document, chat)
        self.n = fields.integer(document, "n", 1, fields.MAX_CHOICES, 1) or 1
        self.logprobs = fields.logprobs(document, chat)  # alternatives per token, None: no logprobs
        if self.logprobs is not None and not config.parameters.get(LOGPROBS_OUTPUT):
            raise OpenAIError(
                f"'logprobs' is not supported by model '{self.model}': its config names no '{LOGPROBS_OUTPUT}' "
                "parameter (the llm backend's models report logprobs)",
                param="logprobs",
            )
        limit = server.settings.openai.max_tokens
        given = fields.integer(document, "max_tokens", 1, limit)
        if chat and given is None:
            given = fields.integer(document, "max_completion_tokens", 1, limit)
        self.asked_max_tokens = given is not None
        self.max_tokens = given if given is not None or chat else DEFAULT_MAX_TOKENS
        self.limit = self.max_tokens if self.max_tokens is not None else limit  # what the server lets run
        self.sampling = {
            "max_tokens": self.max_tokens,
            "temperature": fields.real(document, "temperature", 0, 2),
            "top_p": fields.real(document, "top_p", 0, 1, above_low=True),
            "seed": fields.integer(document, "seed", *fields.INT64),
        }
        self.stop = fields.stop_strings(document.get("stop"))
        self.structured = openai_structured.requested(document)  # (the field that asked, its constraint) or None
        renders = self.messages is not None
        self.tools = openai_tools.requested(document, config, renders, self.structured) if chat else None
        self.cache_salt = document.get("cache_salt")  # vLLM's: the model checks it (the llm backend's prefix cache)
        self.priority = fields.integer(document, "priority", *PRIORITY)  # vLLM's: lower served earlier
        self.choices: list[Choice] = []
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.server = server

    def request(self, index: int = 0) -> InferenceRequest:
        """Choice `index`'s inference request: the prompt, and the sampling settings where the model takes them
        (its seed `seed + index`, vLLM's rule for the n choices of one request)."""
        config = self.served.config
        batched = config.max_batch_size > 0
        if self.messages is not None:
            inputs = {config.parameters[MESSAGES_INPUT]: _tensor([self.messages.encode()], np.object_, batched)}
        else:
            inputs = {config.parameters[TEXT_INPUT]: _tensor([self.prompt.encode()], np.object_, batched)}
        given = {key: value for key, value in self.sampling.items() if value is not None}
        if "seed" in given:
            given["seed"] = _choice_seed(given["seed"], index)
        if self.logprobs is not None:
            given["logprobs"] = self.logprobs
        if self.stop:
            given["stop"] = self.stop
        if self.structured is not None:
            given["structured_outputs"] = self.structured[1].as_options()
        if self.cache_salt is not None:
            given["cache_salt"] = self.cache_salt
        if self.tools is not None:
            given |= self.tools.options()
        if self.priority is not None:
            given["priority"] = self.priority
        for name, dtype in SAMPLING_INPUTS.items():
            if name in given and config.input_named(name) is not None:
                inputs[name] = _tensor([given[name]], dtype, batched)
        if config.input_named("sampling_parameters") is not None:
            inputs["sampling_parameters"] = _tensor([json.dumps(given).encode()], np.object_, batched)
        if config.input_named("stream") is not None:
            inputs["stream"] = _tensor([True], np.bool_, batched)
        return InferenceRequest(self.model, inputs, batch_size=1, parameters=dict(given))

    async def start(self) -> list[Choice]:
        """Start the n choices' requests on the route; a refusal cancels those already started."""
        config = self.served.config
        logprobs_output = config.parameters.get(LOGPROBS_OUTPUT) if self.logprobs is not None else None
        if self.structured is not None:
            await openai_structured.check(self.served, self.model, *self.structured)
        if self.tools is not None:
            await self.tools.check(self.served, self.model)
        try:
            for index in range(self.n):
                stream = await self.server.infer_stream(self.request(index), self.route)
                choice = Choice(
                    index,
                    stream,
                    text_output=config.parameters[TEXT_OUTPUT],
                    logprobs_output=logprobs_output,
                    stop=self.stop,
                    limit=self.limit,
                )
                self.choices.append(choice)
        except InferaError as exc:
            self.cancel()
            kind = "invalid_request_error" if exc.status < 500 else "server_error"
            raise OpenAIError(exc.message, exc.status, kind) from None
        return self.choices

    def cancel(self) -> None:
        for choice in self.choices:
            choice.stream.cancel()

    def usage(self) -> dict[str, Any]:
        """The prompt's tokens once and the completion tokens of every choice (vLLM's sum); the prefix cache's hit
        as the first choice's model counted it."""
        counts = self.choices[0].counts if self.choices else {}
        prompt = counts.get("prompt_tokens", len(self.prompt))
        completion = sum(choice.completion_tokens() for choice in self.choices)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["total_tokens"] = prompt + completion
        if "cached_tokens" in counts:
            usage["prompt_tokens_details"] = {"cached_tokens": counts["cached_tokens"]}
        return usage

    def _logprobs(self, entries: list[dict[str, Any]], offset: int) -> dict[str, Any] | None:
        if self.logprobs is None:
            return None
        return chat_logprobs(entries) if self.chat else completion_logprobs(entries, offset)

    def choice(self, choice: Choice, text: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
        answer: dict[str, Any] = {"index": choice.index}
        finish = choice.finish_reason
        if self.chat:
            answer["message"] = {"role": "assistant", "content": text}
            if self.tools is not None:
                answer["message"], finish = self.tools.answer(text, finish)
            if self.logprobs is not None:
                answer["logprobs"] = self._logprobs(entries, 0)
        else:
            answer["text"] = text
            answer["logprobs"] = self._logprobs(entries, 0)
        answer["finish_reason"] = finish
        return answer

    def answer(self, wholes: list[tuple[str, list[dict[str, Any]]]]) -> bytes:
        kind = "chat.completion" if self.chat else "text_completion"
        choices = [self.choice(choice, *whole) for choice, whole in zip(self.choices, wholes, strict=True)]
        document = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
        document["usage"] = self.usage()
        return orjson.dumps(document)

    def chunk(
        self,
        choice: Choice,
        piece: Piece | None = None,
        finish: str | None = None,
        *,
        role: bool = False,
        usage: bool = False,
    ) -> bytes:
        """One server-sent chunk of choice `choice`: a piece, its first (chat: the role) or its last (`finish`,
        and the usage on the last chunk of all)."""
        text = piece.text if piece is not None else None
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if self.tools is not None and not role:  # text that may be a tool call is held until decided
                delta, finish = self.tools.delta(choice.index, text, finish)
                if not delta and finish is None and not (self.logprobs is not None and piece and piece.logprobs):
                    return b""
            elif text is not None:
                delta["content"] = text
            answer: dict[str, Any] = {"index": choice.index, "delta": delta}
            if self.logprobs is not None and piece is not None:
                answer["logprobs"] = self._logprobs(piece.logprobs, piece.offset)
            answer["finish_reason"] = finish
            kind = "chat.completion.chunk"
        else:
            logprobs = self._logprobs(piece.logprobs, piece.offset) if piece is not None else None
            answer = {"index": choice.index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
            kind = "text_completion"
        payload = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [answer]}
        if usage:
            payload["usage"] = self.usage()
        return b"data: " + orjson.dumps(payload) + b"\n\n"


async def complete(
    server: InferenceServer,
    body: bytes,
    chat: bool,
    gate: BudgetGate | None = None,
    principal: Principal = ANONYMOUS,
) -> bytes | StreamReply:
    """A completion: the whole answer as JSON, or (stream: true) a StreamReply of chunks ending in [DONE]; held to
    the caller's budgets when a gate is given."""
    completion = Completion(server, body, chat)
    admission = await openai_budgets.admit(gate or BudgetGate(), principal, completion)
    try:
        choices = await completion.start()
    except BaseException:
        await admission.settle(None)
        raise
    if not completion.stream:
        try:
            wholes = await asyncio.gather(*(whole(choice) for choice in choices), return_exceptions=True)
            for result in wholes:
                if isinstance(result, BaseException):
                    completion.cancel()
                    raise result
            return completion.answer(wholes)  # type: ignore[arg-type] - no exception is left among them
        finally:
            await admission.settle(openai_budgets.usage_of(completion.usage()))

    def cancel() -> None:
        completion.cancel()
        admission.settle_soon(openai_budgets.usage_of(completion.usage()))

    async def chunks() -> AsyncIterator[bytes]:
        ended = 0
        try:
            async for item in interleaved(choices):
                if isinstance(item, Piece):
                    yield completion.chunk(item.choice, item)
                    continue
                ended += 1
                yield completion.chunk(item, None, item.finish_reason, usage=ended == len(choices))
        except OpenAIError as exc:
            yield b"data: " + exc.body() + b"\n\n"
            return
        finally:
            admission.settle_soon(openai_budgets.usage_of(completion.usage()))
        yield DONE

    first = b"".join(completion.chunk(choice, role=True) for choice in choices) if chat else b""
    return StreamReply(200, EVENT_STREAM, first, chunks(), cancel)


def _tensor(values: list[Any], dtype: Any, batched: bool) -> np.ndarray:
    array = np.array(values, dtype=dtype)
    return array.reshape(1, -1) if batched else array


def _choice_seed(seed: int, index: int) -> int:
    """`seed + index`, wrapped within 64-bit integers (a seed near the top still seeds every choice)."""
    low, high = fields.INT64
    return (seed + index - low) % (high - low + 1) + low


def _checked_fields(document: dict[str, Any], chat: bool) -> bool:
    """Check the fields this server takes but does not use (so a bad one is a 400, as OpenAI answers); `stream`."""
    fields.real(document, "presence_penalty", -2, 2)
    fields.real(document, "frequency_penalty", -2, 2)
    fields.logit_bias(document.get("logit_bias"))
    if not chat:
        fields.only_one(document, "best_of")
        fields.boolean(document, "echo")
    return fields.boolean(document, "stream")


def is_openai_path(path: str) -> bool:
    """/v1 and its subpaths, and vLLM's /tokenize and /detokenize beside them."""
    return path == "/v1" or path.startswith("/v1/") or path.rstrip("/") in TOKEN_PATHS


class OpenAIApp:
    """ASGI callable for /v1/..., /tokenize and /detokenize; every other path goes to `fallback` (the v2 front end)."""

    def __init__(
        self,
        server: InferenceServer,
        fallback: ASGIApp,
        *,
        authenticate: Authenticate | None = None,
        trusted_origins: tuple[str, ...] = (),
        max_body_bytes: int | None = None,
        budgets: BudgetGate | None = None,
    ) -> None:
        self.server = server
        self.budgets = budgets if budgets is not None else BudgetGate()  # in this process unless given one
        self.fallback = fallback
        self.authenticate = authenticate
        self.trusted_origins = trusted_origins
        if max_body_bytes is None:  # /v1 bodies are parsed on the loop: their own, smaller bound
            max_body_bytes = min(server.settings.openai.max_body_bytes, server.settings.max_body_bytes)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not is_openai_path(path):
            await self.fallback(scope, receive, send)
            return
        reply: Reply | StreamReply
        try:
            reply = await self._answer(scope, receive, path.rstrip("/"))
        except OpenAIError as exc:
            reply = Reply(exc.status, exc.body(), headers=getattr(exc, "headers", []))
        except InferaError as exc:
            kind = "authentication_error" if exc.status == 401 else "invalid_request_error"
            reply = Reply(exc.status, OpenAIError(exc.message, exc.status, kind).body())
        if isinstance(reply, StreamReply):
            await send_stream(send, receive, reply)
        else:
            await send_reply(send, reply)

    async def _answer(self, scope: Scope, receive: Receive, path: str) -> Reply | StreamReply:
        method = scope["method"]
        principal = await self.authenticate(scope) if self.authenticate is not None else ANONYMOUS
        client = scope.get("client")
        current_caller.set(caller_key(principal, client[0] if client else None))  # as /v2 sets it: who asks
        if path == "/v1/models":
            if method != "GET":
                raise OpenAIError(f"method {method} is not allowed; use GET", 405)
            return Reply(200, list_models(self.server))
        if path not in ("/v1/completions", "/v1/chat/completions", "/v1/embeddings", *TOKEN_PATHS):
            raise OpenAIError(f"no endpoint at {path}", 404, "not_found_error")
        if method != "POST":
            raise OpenAIError(f"method {method} is not allowed; use POST", 405)
        check_same_origin(scope, self.trusted_origins)
        declared = next((value for name, value in scope.get("headers", ()) if name.lower() == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:  # refused before a byte of the body is read
            raise OpenAIError(f"request body exceeds the limit of {self.max_body_bytes} bytes", 413)
        body = await read_body(receive, self.max_body_bytes)
        if path == "/v1/embeddings":
            return Reply(200, await openai_embeddings.embed(self.server, body, self.budgets, principal))
        if path in TOKEN_PATHS:
            convert = openai_tokens.tokenize if path == "/tokenize" else openai_tokens.detokenize
            return Reply(200, await convert(self.server, body))
        answer = await complete(self.server, body, path.endswith("/chat/completions"), self.budgets, principal)
        return answer if isinstance(answer, StreamReply) else Reply(200, answer)
