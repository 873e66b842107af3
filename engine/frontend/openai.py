"""OpenAI-compatible endpoints over text-generating models: GET /v1/models, POST /v1/completions and
POST /v1/chat/completions, streamed (`stream: true`, server-sent chunks then `data: [DONE]`) or not.

A model is a text generator when its config names its text tensors: `parameters { key: "openai_text_input" ... }`
and `openai_text_output` (BYTES). The prompt goes to the text input; for chat, a model whose config also names an
`openai_messages_input` (the `llm` backend) gets the messages there as JSON and renders them with its own chat
template, any other gets them as "role: content" lines and a last "assistant:" line. max_tokens, temperature, top_p
and seed go to inputs of those names when the model has them, and as JSON to a `sampling_parameters` input when it
has one; a `stream` input is set to true, so each response is one piece of text (a token). Stop strings and
max_tokens (when none is given, for chat, INFERA_OPENAI_MAX_TOKENS) end the text here whatever the model does.
Usage and finish_reason are the model's own when its last response carries them (`prompt_tokens`,
`completion_tokens`, `cached_tokens` as usage.prompt_tokens_details.cached_tokens, `finish_reason`); otherwise a
completion's tokens are counted as the model's responses, and a prompt's as its characters. The same API tokens as
/v2 are checked (`Authorization: Bearer <key>`), before the body is read; a body is at most
INFERA_OPENAI_MAX_BODY_BYTES, and every field it carries is checked by type, range and length (openai_fields.py)
before any work is done for it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.errors import InferaError, ModelNotFound
from engine.frontend import openai_fields as fields
from engine.frontend.cross_site import check_same_origin
from engine.frontend.generate import StreamReply
from engine.frontend.handlers import Reply
from engine.frontend.http import ASGIApp, Authenticate, Receive, Scope, Send, read_body, send_reply, send_stream
from engine.frontend.openai_fields import OpenAIError
from engine.llm.text import StopMatcher
from engine.protocol import parse_json_object
from engine.serving.streams import ResponseStream
from engine.traffic.router import RequestKey
from engine.types import InferenceRequest

if TYPE_CHECKING:
    from engine.config.model_config import ModelConfig
    from engine.serving.lifecycle import ServedVersion
    from engine.serving.server import InferenceServer

TEXT_INPUT = "openai_text_input"
TEXT_OUTPUT = "openai_text_output"
MESSAGES_INPUT = "openai_messages_input"
COUNT_OUTPUTS = ("prompt_tokens", "completion_tokens", "cached_tokens")
FINISH_REASONS = ("stop", "length")
SAMPLING_INPUTS = {"max_tokens": np.int32, "temperature": np.float32, "top_p": np.float32, "seed": np.int64}
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
EVENT_STREAM = b"text/event-stream; charset=utf-8"
DONE = b"data: [DONE]\n\n"


def is_text_generator(config: ModelConfig) -> bool:
    return bool(config.parameters.get(TEXT_INPUT) and config.parameters.get(TEXT_OUTPUT))


def list_models(server: InferenceServer) -> bytes:
    """GET /v1/models: every ready model that generates text."""
    data = []
    for served in sorted(server.served_versions(), key=lambda s: (s.name, s.version)):
        if is_text_generator(served.config) and served.name not in {d["id"] for d in data}:
            if server.model_ready(served.name):
                data.append({"id": served.name, "object": "model", "created": 0, "owned_by": "infera"})
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
        self.model = document.get("model")
        if not isinstance(self.model, str) or not self.model:
            raise OpenAIError("'model' must name a model", param="model")
        try:
            self.route = server.route(RequestKey(self.model))  # the one version it runs on, chosen once
            self.served: ServedVersion = self.route.served
        except ModelNotFound:
            raise OpenAIError(f"The model '{self.model}' does not exist", 404, "not_found_error", "model") from None
        if not is_text_generator(self.served.config):
            raise OpenAIError(
                f"model '{self.model}' does not generate text: its config names no '{TEXT_INPUT}' and "
                f"'{TEXT_OUTPUT}' parameters",
                param="model",
            )
        self.messages: str | None = None  # the messages as JSON, for a model that renders its own chat template
        if chat and self.served.config.parameters.get(MESSAGES_INPUT):
            conversation = [{"role": role, "content": text} for role, text in fields.messages(document.get("messages"))]
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
        limit = server.settings.openai.max_tokens
        given = fields.integer(document, "max_tokens", 1, limit)
        if chat and given is None:
            given = fields.integer(document, "max_completion_tokens", 1, limit)
        self.max_tokens = given if given is not None or chat else DEFAULT_MAX_TOKENS
        self.limit = self.max_tokens if self.max_tokens is not None else limit  # what the server lets run
        self.sampling = {
            "max_tokens": self.max_tokens,
            "temperature": fields.real(document, "temperature", 0, 2),
            "top_p": fields.real(document, "top_p", 0, 1, above_low=True),
            "seed": fields.integer(document, "seed", *fields.INT64),
        }
        self.stop = fields.stop_strings(document.get("stop"))
        self.tokens = 0  # responses received: the completion's tokens
        self.finish_reason = "stop"
        self.counts: dict[str, int] = {}  # the model's own token counts, from its last response
        self.model_reason: str | None = None  # "stop" or "length", when the model's last response says why it ended
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.server = server

    def request(self) -> InferenceRequest:
        """The inference request for the model: the prompt, and the sampling settings where it takes them."""
        config = self.served.config
        batched = config.max_batch_size > 0
        if self.messages is not None:
            inputs = {config.parameters[MESSAGES_INPUT]: _tensor([self.messages.encode()], np.object_, batched)}
        else:
            inputs = {config.parameters[TEXT_INPUT]: _tensor([self.prompt.encode()], np.object_, batched)}
        given = {key: value for key, value in self.sampling.items() if value is not None}
        if self.stop:
            given["stop"] = self.stop
        for name, dtype in SAMPLING_INPUTS.items():
            if name in given and config.input_named(name) is not None:
                inputs[name] = _tensor([given[name]], dtype, batched)
        if config.input_named("sampling_parameters") is not None:
            inputs["sampling_parameters"] = _tensor([json.dumps(given).encode()], np.object_, batched)
        if config.input_named("stream") is not None:
            inputs["stream"] = _tensor([True], np.bool_, batched)
        return InferenceRequest(self.model, inputs, batch_size=1, parameters=dict(given))

    def text_of(self, outputs: dict[str, np.ndarray] | None) -> str:
        array = (outputs or {}).get(self.served.config.parameters[TEXT_OUTPUT])
        if array is None:
            return ""
        return "".join(item.decode("utf-8", errors="replace") for item in np.asarray(array).reshape(-1))

    async def pieces(self, stream: ResponseStream) -> AsyncIterator[str]:
        """The generated text piece by piece, cut at the first stop string or after `limit` tokens (either cancels
        the rest, whatever the model does)."""
        matcher = StopMatcher(self.stop)
        async for response in stream:
            if response.error is not None:
                raise OpenAIError(response.error.message, 500, "server_error")
            if response.empty:
                continue
            self.tokens += 1
            self.take_final(response.outputs or {})
            text, stopped = matcher.feed(self.text_of(response.outputs))
            if text:
                yield text
            if stopped:
                self.finish_reason = "stop"
                stream.cancel()
                return
            if self.tokens >= self.limit:
                stream.cancel()
                break
        if rest := matcher.rest():
            yield rest
        if self.model_reason is not None:
            self.finish_reason = self.model_reason
        elif self.tokens >= self.limit:
            self.finish_reason = "length"

    def take_final(self, outputs: dict[str, np.ndarray]) -> None:
        """Keep the model's finish_reason and token counts where its (last) response carries them."""
        for name in COUNT_OUTPUTS:
            array = outputs.get(name)
            if array is not None and np.asarray(array).size:
                self.counts[name] = int(np.asarray(array).reshape(-1)[0])
        reason = outputs.get("finish_reason")
        if reason is not None and np.asarray(reason).size:
            item = np.asarray(reason).reshape(-1)[0]
            text = item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
            if text in FINISH_REASONS:
                self.model_reason = text

    def usage(self) -> dict[str, Any]:
        prompt = self.counts.get("prompt_tokens", len(self.prompt))
        completion = self.counts.get("completion_tokens", self.tokens)
        usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
        usage["total_tokens"] = prompt + completion
        if "cached_tokens" in self.counts:
            usage["prompt_tokens_details"] = {"cached_tokens": self.counts["cached_tokens"]}
        return usage

    def choice(self, text: str) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": self.finish_reason}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish_reason}

    def answer(self, text: str) -> bytes:
        kind = "chat.completion" if self.chat else "text_completion"
        return orjson.dumps(
            {
                "id": self.id,
                "object": kind,
                "created": self.created,
                "model": self.model,
                "choices": [self.choice(text)],
                "usage": self.usage(),
            }
        )

    def chunk(self, text: str | None, finish: str | None = None, role: bool = False) -> bytes:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            kind = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            kind = "text_completion"
        payload = {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": [choice]}
        if finish is not None:
            payload["usage"] = self.usage()
        return b"data: " + orjson.dumps(payload) + b"\n\n"


async def complete(server: InferenceServer, body: bytes, chat: bool) -> bytes | StreamReply:
    """A completion: the whole answer as JSON, or (stream: true) a StreamReply of chunks ending in [DONE]."""
    completion = Completion(server, body, chat)
    try:
        stream = await server.infer_stream(completion.request(), completion.route)
    except InferaError as exc:
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        raise OpenAIError(exc.message, exc.status, kind) from None
    if not completion.stream:
        text = "".join([piece async for piece in completion.pieces(stream)])
        return completion.answer(text)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for piece in completion.pieces(stream):
                yield completion.chunk(piece)
        except OpenAIError as exc:
            yield b"data: " + exc.body() + b"\n\n"
            return
        yield completion.chunk(None if chat else "", completion.finish_reason)
        yield DONE

    first = completion.chunk("", role=True) if chat else b""
    return StreamReply(200, EVENT_STREAM, first, chunks(), stream.cancel)


def _tensor(values: list[Any], dtype: Any, batched: bool) -> np.ndarray:
    array = np.array(values, dtype=dtype)
    return array.reshape(1, -1) if batched else array


def _checked_fields(document: dict[str, Any], chat: bool) -> bool:
    """Check the fields this server takes but does not use (so a bad one is a 400, as OpenAI answers); `stream`."""
    fields.only_one(document, "n")
    fields.real(document, "presence_penalty", -2, 2)
    fields.real(document, "frequency_penalty", -2, 2)
    fields.logit_bias(document.get("logit_bias"))
    if chat:
        fields.boolean(document, "logprobs")
        fields.integer(document, "top_logprobs", 0, 20)
    else:
        fields.only_one(document, "best_of")
        fields.integer(document, "logprobs", 0, 5)
        fields.boolean(document, "echo")
    return fields.boolean(document, "stream")


class OpenAIApp:
    """ASGI callable for /v1/...; every other path goes to `fallback` (the v2 front end)."""

    def __init__(
        self,
        server: InferenceServer,
        fallback: ASGIApp,
        *,
        authenticate: Authenticate | None = None,
        trusted_origins: tuple[str, ...] = (),
        max_body_bytes: int | None = None,
    ) -> None:
        self.server = server
        self.fallback = fallback
        self.authenticate = authenticate
        self.trusted_origins = trusted_origins
        if max_body_bytes is None:  # /v1 bodies are parsed on the loop: their own, smaller bound
            max_body_bytes = min(server.settings.openai.max_body_bytes, server.settings.max_body_bytes)
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not (path == "/v1" or path.startswith("/v1/")):
            await self.fallback(scope, receive, send)
            return
        reply: Reply | StreamReply
        try:
            reply = await self._answer(scope, receive, path.rstrip("/"))
        except OpenAIError as exc:
            reply = Reply(exc.status, exc.body())
        except InferaError as exc:
            kind = "authentication_error" if exc.status == 401 else "invalid_request_error"
            reply = Reply(exc.status, OpenAIError(exc.message, exc.status, kind).body())
        if isinstance(reply, StreamReply):
            await send_stream(send, receive, reply)
        else:
            await send_reply(send, reply)

    async def _answer(self, scope: Scope, receive: Receive, path: str) -> Reply | StreamReply:
        method = scope["method"]
        if self.authenticate is not None:
            await self.authenticate(scope)
        if path == "/v1/models":
            if method != "GET":
                raise OpenAIError(f"method {method} is not allowed; use GET", 405)
            return Reply(200, list_models(self.server))
        if path not in ("/v1/completions", "/v1/chat/completions"):
            raise OpenAIError(f"no endpoint at {path}", 404, "not_found_error")
        if method != "POST":
            raise OpenAIError(f"method {method} is not allowed; use POST", 405)
        check_same_origin(scope, self.trusted_origins)
        declared = next((value for name, value in scope.get("headers", ()) if name.lower() == b"content-length"), b"")
        if declared.isdigit() and int(declared) > self.max_body_bytes:  # refused before a byte of the body is read
            raise OpenAIError(f"request body exceeds the limit of {self.max_body_bytes} bytes", 413)
        body = await read_body(receive, self.max_body_bytes)
        answer = await complete(self.server, body, chat=path.endswith("/chat/completions"))
        return answer if isinstance(answer, StreamReply) else Reply(200, answer)
