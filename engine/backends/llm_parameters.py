"""The `llm` backend's config parameters: read, cast and checked, each refusal naming the model and the parameter."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.config.model_config import ModelConfig
from engine.errors import LoadError

PREFIX_CACHE_SCOPES = ("caller", "shared")


def parameter(config: ModelConfig, key: str, cast: Callable[[str], Any], default: Any) -> Any:
    """A parameter cast by `cast`, or `default` when it is unset or blank."""
    raw = config.parameters.get(key, "")
    if str(raw).strip() == "":
        return default
    try:
        return cast(str(raw).strip())
    except ValueError:
        raise LoadError(f"model '{config.name}': parameter '{key}' must be {cast.__name__}, got '{raw}'") from None


def switch(value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise ValueError(value)
    return lowered == "true"


switch.__name__ = "true or false"


def positive(name: str, value: int, config: ModelConfig) -> int:
    if value < 1:
        raise LoadError(f"model '{config.name}': parameter '{name}' must be at least 1, got {value}")
    return value


def prefix_cache_per_caller(config: ModelConfig) -> bool:
    """`prefix_cache_scope`: "caller" (the default: each caller's cached prefixes its own) or "shared"."""
    scope = parameter(config, "prefix_cache_scope", str, "caller")
    if scope not in PREFIX_CACHE_SCOPES:
        raise LoadError(
            f"model '{config.name}': parameter 'prefix_cache_scope' must be one of {', '.join(PREFIX_CACHE_SCOPES)}, "
            f"got '{scope}'"
        )
    return scope == "caller"


def quantization_of(config: ModelConfig, dtype: str, device: str) -> str:
    """`quantization`: "none" (the default), "int8" or "int4", checked against the dtype and the device."""
    from engine.llm.quantization import check_quantization

    value = parameter(config, "quantization", str, "none")
    try:
        return check_quantization(value, dtype, device)
    except LoadError as exc:
        raise LoadError(f"model '{config.name}': {exc.reason}") from None


def dtype_of(config: ModelConfig, device: str) -> str:
    """`dtype`: float32, bfloat16, float16, or "auto" (the default): bfloat16 where the device multiplies it natively
    (engine/llm/weights.py's `native_bfloat16`), float32 elsewhere and under int8 quantization (which needs it)."""
    from engine.llm.weights import native_bfloat16

    value = parameter(config, "dtype", str, "auto")
    if value != "auto":
        return value
    if parameter(config, "quantization", str, "none") == "int8":
        return "float32"
    return "bfloat16" if native_bfloat16(device) else "float32"
