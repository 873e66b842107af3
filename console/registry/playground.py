"""Which registered models generate text, as the console's playground and the engine's /v1 endpoints see them:
a config whose parameters name its text input and output tensors (engine.frontend.openai); which of them take chat
messages (their playground is a chat); and which are language models of the engine's `llm` backend (their page shows
the scheduler's numbers live)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api import MESSAGES_INPUT, TEXT_INPUT, TEXT_OUTPUT

DEFAULT_CHAT_TOKENS = 256


def _parameter(config: Mapping[str, Any] | None, key: str) -> str:
    """A config parameter's string value (its JSON form: {"string_value": ...}), "" when absent."""
    value = ((config or {}).get("parameters") or {}).get(key) or {}
    return value.get("string_value", "") if isinstance(value, Mapping) else ""


def generates_text(config: Mapping[str, Any] | None) -> bool:
    """Whether a config (its JSON form, as the registry keeps it) declares a text generator."""
    return bool(_parameter(config, TEXT_INPUT) and _parameter(config, TEXT_OUTPUT))


def chats(config: Mapping[str, Any] | None) -> bool:
    """Whether a text generator takes chat messages (its config names an `openai_messages_input`, as the `llm`
    backend's do): its page's playground is a chat on /v1/chat/completions."""
    return generates_text(config) and bool(_parameter(config, MESSAGES_INPUT))


@dataclass(frozen=True)
class ChatTokens:
    """The chat's max_tokens field: its default and its bound."""

    default: int
    most: int


def chat_tokens(config: Mapping[str, Any] | None, engine_limit: int) -> ChatTokens:
    """The most tokens the chat may ask for: the engine's /v1 limit (INFERA_OPENAI_MAX_TOKENS), or the model's
    `max_model_len` when its config declares a smaller one (a longer answer could never fit); DEFAULT_CHAT_TOKENS
    by default, within it."""
    declared = _parameter(config, "max_model_len").strip()
    most = min(engine_limit, int(declared)) if declared.isdigit() and int(declared) > 0 else engine_limit
    return ChatTokens(min(DEFAULT_CHAT_TOKENS, most), most)


def is_language_model(config: Mapping[str, Any] | None) -> bool:
    """Whether a config (its JSON form) runs on the engine's `llm` backend."""
    return (config or {}).get("backend") == "llm"
