"""Which registered models generate text, as the console's playground and the engine's /v1 endpoints see them:
a config whose parameters name its text input and output tensors (engine.frontend.openai); and which of them are
language models of the engine's `llm` backend (their page shows the scheduler's numbers live)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.api import TEXT_INPUT, TEXT_OUTPUT


def generates_text(config: Mapping[str, Any] | None) -> bool:
    """Whether a config (its JSON form, as the registry keeps it) declares a text generator."""
    parameters = (config or {}).get("parameters") or {}

    def named(key: str) -> str:
        value = parameters.get(key) or {}
        return value.get("string_value", "") if isinstance(value, Mapping) else ""

    return bool(named(TEXT_INPUT) and named(TEXT_OUTPUT))


def is_language_model(config: Mapping[str, Any] | None) -> bool:
    """Whether a config (its JSON form) runs on the engine's `llm` backend."""
    return (config or {}).get("backend") == "llm"
