"""OpenAI-compatible endpoints over text-generating models: GET /v1/models, POST /v1/completions and
POST /v1/chat/completions, streamed (`stream: true`, server-sent chunks then `data: [DONE]`) or not.

A model is a text generator when its config names its text tensors: `parameters { key: "openai_text_input" ... }`
and `openai_text_output` (BYTES). The prompt (for chat, the messages rendered as "role: content" lines and a last
"assistant:" line) goes to the text input; max_tokens, temperature, top_p and seed go to inputs of those names
when the model has them, and as JSON to a `sampling_parameters` input when it has one; a `stream` input is set to
true, so each response is one piece of text (a token). Stop strings end the text here whatever the model does.
Usage counts a completion's tokens as the model's responses, and a prompt's as its characters. The same API tokens
as /v2 are checked (`Authorization: Bearer <key>`).
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
from engine.frontend.cross_site import check_same_origin
from engine.frontend.generate import StreamReply
from engine.frontend.handlers import Reply
from engine.frontend.http import ASGIApp, Authenticate, Receive, Scope, Send, read_body, send_reply, send_stream
from engine.protocol import parse_json_object
from engine.streams import ResponseStream
from engine.types import InferenceRequest

if TYPE_CHECKING:
    from engine.config import ModelConfig
    from engine.lifecycle import ServedVersion
    from engine.server import InferenceServer

TEXT_INPUT = "openai_text_input"
TEXT_OUTPUT = "openai_text_output"
SAMPLING_INPUTS = {"max_tokens": np.int32, "temperature": np.float32, "top_p": np.float32, "seed": np.int64}
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
EVENT_STREAM = b"text/event-stream; charset=utf-8"
DONE = b"data: [DONE]\n\n"


class OpenAIError(InferaError):
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}})


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
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty list", param="messages")
    lines = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise OpenAIError(f"messages[{index}] must be an object with a string 'content'", param="messages")
        lines.append(f"{message.get('role', 'user')}: {message['content']}")
    return "\n".join(lines) + "\nassistant:"


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
            self.served: ServedVersion = server.get_model(self.model)
        except ModelNotFound:
            raise OpenAIError(f"The model '{self.model}' does not exist", 404, "not_found_error", "model") from None
        if not is_text_generator(self.served.config):
            raise OpenAIError(
                f"model '{self.model}' does not generate text: its config names no '{TEXT_INPUT}' and "
                f"'{TEXT_OUTPUT}' parameters",
                param="model",
            )
        if chat:
            self.prompt = chat_prompt(document.get("messages"))
        else:
            prompt = document.get("prompt", "")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                raise OpenAIError("'prompt' must be a string (one prompt per request)", param="prompt")
            self.prompt = prompt
        self.stream = bool(document.get("stream", False))
        self.max_tokens = _number(document, "max_tokens", int, DEFAULT_MAX_TOKENS if not chat else None)
        self.sampling = {
            "max_tokens": self.max_tokens,
            "temperature": _number(document, "temperature", float, None),
            "top_p": _number(document, "top_p", float, None),
            "seed": _number(document, "seed", int, None),
        }
        stop = document.get("stop")
        self.stop = [stop] if isinstance(stop, str) else list(stop or [])
        if not all(isinstance(s, str) and s for s in self.stop):
            raise OpenAIError("'stop' must be a string or a list of non-empty strings", param="stop")
        self.tokens = 0  # responses received: the completion's tokens
        self.finish_reason = "stop"
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.server = server

    def request(self) -> InferenceRequest:
        """The inference request for the model: the prompt, and the sampling settings where it takes them."""
        config = self.served.config
        batched = config.max_batch_size > 0
        text_input = config.parameters[TEXT_INPUT]
        inputs = {text_input: _tensor([self.prompt.encode()], np.object_, batched)}
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
        """The generated text piece by piece, cut at the first stop string (which cancels the rest)."""
        held = ""  # text that could still be the start of a stop string
        async for response in stream:
            if response.error is not None:
                raise OpenAIError(response.error.message, 500, "server_error")
            if response.empty:
                continue
            self.tokens += 1
            held += self.text_of(response.outputs)
            cut = min((held.find(s) for s in self.stop if s in held), default=-1)
            if cut >= 0:
                self.finish_reason = "stop"
                stream.cancel()
                if held[:cut]:
                    yield held[:cut]
                return
            keep = max((_overlap(held, s) for s in self.stop), default=0)
            if len(held) > keep:
                yield held[: len(held) - keep]
                held = held[len(held) - keep :]
        if held:
            yield held
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            self.finish_reason = "length"

    def usage(self) -> dict[str, int]:
        prompt = len(self.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": self.tokens, "total_tokens": prompt + self.tokens}

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
        stream = await server.infer_stream(completion.request())
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


def _number(document: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = document.get(key, default)
    if value is None:
        return default
    whole = kind is not int or (isinstance(value, (int, float)) and float(value).is_integer())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not whole:
        raise OpenAIError(f"'{key}' must be a {'whole ' if kind is int else ''}number", param=key)
    if kind is int and value < 0 or key == "temperature" and not 0 <= value <= 2:
        raise OpenAIError(f"'{key}' is out of range: {value}", param=key)
    return kind(value)


def _overlap(text: str, stop: str) -> int:
    """How many characters at the end of `text` could begin `stop` (kept back until the next piece decides)."""
    for size in range(min(len(stop) - 1, len(text)), 0, -1):
        if stop.startswith(text[-size:]):
            return size
    return 0


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
        self.max_body_bytes = max_body_bytes if max_body_bytes is not None else server.settings.max_body_bytes

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
        body = await read_body(receive, self.max_body_bytes)
        answer = await complete(self.server, body, chat=path.endswith("/chat/completions"))
        return answer if isinstance(answer, StreamReply) else Reply(200, answer)
