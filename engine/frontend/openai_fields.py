"""The fields of an OpenAI request checked by type and range, each refused in OpenAI's error shape naming its param.

Bounds follow OpenAI's API where it states one (temperature 0..2, penalties -2..2, logit_bias -100..100,
top_logprobs 0..20), vLLM's where it is wider (a completion's logprobs 0..20, as its max_logprobs), 64-bit integers
for a seed, and this server's own for what a body could otherwise make the loop and the models work through: at
most MAX_STOPS stop strings of MAX_STOP_CHARS characters (OpenAI allows 4, vLLM more), MAX_MESSAGES messages,
MAX_LOGIT_BIAS biases, MAX_CHOICES choices (`n`), MAX_TOKEN_IDS token ids to detokenize. Booleans are never
numbers, numbers never booleans.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import orjson

from engine.errors import InferaError, ModelNotFound
from engine.traffic.router import RequestKey, VersionRoute

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer

MAX_STOPS = 16
MAX_STOP_CHARS = 256
MAX_MESSAGES = 2048
MAX_ROLE_CHARS = 64
MAX_LOGIT_BIAS = 300
MAX_CHOICES = 16  # `n`: each choice is a sequence of its own on the model
MAX_LOGPROBS = 20  # a completion's `logprobs` and a chat's `top_logprobs` (vLLM's max_logprobs)
MAX_TOKEN_IDS = 65536
INT64 = (-(2**63), 2**63 - 1)


class OpenAIError(InferaError):
    """An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param

    def body(self) -> bytes:
        return orjson.dumps({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": None}})


def integer(document: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int | None:
    """A whole number in [low, high] (2.0 counts, 2.5 and true do not), or `default` when absent or null."""
    value = document.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OpenAIError(f"'{key}' must be a whole number, got {_shown(value)}", param=key)
    if isinstance(value, float) and not value.is_integer():  # orjson parses no NaN or infinity
        raise OpenAIError(f"'{key}' must be a whole number, got {value}", param=key)
    if not low <= value <= high:
        raise OpenAIError(f"'{key}' must be between {low} and {high}, got {_shown(value)}", param=key)
    return int(value)


def real(document: dict[str, Any], key: str, low: float, high: float, *, above_low: bool = False) -> float | None:
    """A number in [low, high] (or (low, high] with `above_low`), or None when absent or null."""
    value = document.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise OpenAIError(f"'{key}' must be a number, got {_shown(value)}", param=key)
    if not (low < value if above_low else low <= value) or value > high:
        bound = f"greater than {low}" if above_low else f"at least {low}"
        raise OpenAIError(f"'{key}' must be {bound} and at most {high}, got {_shown(value)}", param=key)
    return float(value)


def model_route(server: InferenceServer, document: dict[str, Any]) -> tuple[str, VersionRoute]:
    """`model`: a model's name, and the one version the request runs on (chosen here, once); 404 when unknown."""
    model = document.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("'model' must name a model", param="model")
    try:
        return model, server.route(RequestKey(model))
    except ModelNotFound:
        raise OpenAIError(f"The model '{model}' does not exist", 404, "not_found_error", "model") from None


def boolean(document: dict[str, Any], key: str, default: bool = False) -> bool:
    """true or false (absent or null: `default`); 1, "yes" and the like are refused."""
    value = document.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise OpenAIError(f"'{key}' must be true or false, got {_shown(value)}", param=key)
    return value


def only_one(document: dict[str, Any], key: str) -> None:
    """`best_of`: this server ranks no candidates (vLLM has dropped it too)."""
    if integer(document, key, 1, 128, 1) != 1:
        raise OpenAIError(f"'{key}' must be 1: this server generates one choice per request", param=key)


def logprobs(document: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives each token's logprob comes with, or None when logprobs are not asked for: a
    completion's `logprobs: k`; a chat's `logprobs: true` with `top_logprobs: k` (0 when absent; above 0 it needs
    `logprobs: true`)."""
    if not chat:
        return integer(document, "logprobs", 0, MAX_LOGPROBS)
    top = integer(document, "top_logprobs", 0, MAX_LOGPROBS)
    if not boolean(document, "logprobs"):
        if top:  # 0 asks for nothing: accepted either way
            raise OpenAIError("'top_logprobs' needs 'logprobs' set to true", param="top_logprobs")
        return None
    return top or 0


def token_ids(value: Any) -> list[int]:
    """`tokens` to detokenize: a list of at most MAX_TOKEN_IDS token ids (whole numbers, 0 or more)."""
    if not isinstance(value, list):
        raise OpenAIError("'tokens' must be a list of token ids", param="tokens")
    if len(value) > MAX_TOKEN_IDS:
        raise OpenAIError(f"'tokens' may hold at most {MAX_TOKEN_IDS} token ids, got {len(value)}", param="tokens")
    for token in value:
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise OpenAIError(f"'tokens' must hold token ids (0 or more), got {_shown(token)}", param="tokens")
    return value


def stop_strings(value: Any) -> list[str]:
    """`stop`: null, a string or a list of at most MAX_STOPS strings, each 1 to MAX_STOP_CHARS characters."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise OpenAIError("'stop' must be a string or a list of strings", param="stop")
    if len(value) > MAX_STOPS:
        raise OpenAIError(f"'stop' may hold at most {MAX_STOPS} strings, got {len(value)}", param="stop")
    for stop in value:
        if not isinstance(stop, str) or not stop:
            raise OpenAIError("'stop' must be a string or a list of non-empty strings", param="stop")
        if len(stop) > MAX_STOP_CHARS:
            raise OpenAIError(
                f"'stop' strings may be at most {MAX_STOP_CHARS} characters, got one of {len(stop)}", param="stop"
            )
    return value


def logit_bias(value: Any) -> None:
    """`logit_bias`: at most MAX_LOGIT_BIAS token ids (as strings), each biased by -100 to 100."""
    if value is None:
        return
    if not isinstance(value, dict):
        raise OpenAIError("'logit_bias' must be an object of token ids to biases", param="logit_bias")
    if len(value) > MAX_LOGIT_BIAS:
        raise OpenAIError(
            f"'logit_bias' may hold at most {MAX_LOGIT_BIAS} tokens, got {len(value)}", param="logit_bias"
        )
    for token, bias in value.items():
        if not (token.isascii() and token.isdigit()) or len(token) > 10:
            raise OpenAIError(f"'logit_bias' keys must be token ids, got {_shown(token)}", param="logit_bias")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not -100 <= bias <= 100:
            raise OpenAIError(
                f"'logit_bias' of token {token} must be a number from -100 to 100, got {_shown(bias)}",
                param="logit_bias",
            )


def messages(value: Any) -> list[tuple[str, str]]:
    """`messages`: 1 to MAX_MESSAGES objects, each a string `content` and (by default "user") a string `role`."""
    if not isinstance(value, list) or not value:
        raise OpenAIError("'messages' must be a non-empty list", param="messages")
    if len(value) > MAX_MESSAGES:
        raise OpenAIError(f"'messages' may hold at most {MAX_MESSAGES} messages, got {len(value)}", param="messages")
    checked = []
    for index, message in enumerate(value):
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise OpenAIError(f"messages[{index}] must be an object with a string 'content'", param="messages")
        role = message.get("role", "user")
        if not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_CHARS:
            raise OpenAIError(
                f"messages[{index}] 'role' must be a string of 1 to {MAX_ROLE_CHARS} characters", param="messages"
            )
        checked.append((role, message["content"]))
    return checked


def _shown(value: Any) -> str:
    """A value named in JSON's words, cut short: an error never echoes a megabyte back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if len(repr(value)) <= 40 else f"{value:.3e}"
    if isinstance(value, str):
        return orjson.dumps(value[:40]).decode() + ("..." if len(value) > 40 else "")
    return "an object" if isinstance(value, dict) else "a list" if isinstance(value, list) else "null"
