"""Triton's restricted APIs and header forwarding as settings: `<categories>:<header>=<value>` groups and a pattern."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from engine.environment.values import SettingError, read_text

# Triton's restricted categories (--http-restricted-api, --grpc-restricted-protocol); the endpoints and calls of
# each are engine/frontend/header_rules.py's one map
RESTRICTED_CATEGORIES = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
GRPC_RESTRICTED_HEADER_PREFIX = "triton-grpc-protocol-"  # Triton's: a gRPC restriction's key names this metadata
_HEADER_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


@dataclass(frozen=True)
class Restriction:
    """One group of Triton's restricted-API setting: requests of these categories need `header: value`."""

    categories: frozenset[str]
    header: str  # lowercase, as servers hand header and metadata names on
    value: str


@dataclass(frozen=True)
class HeaderRules:
    """What one front end asks of a request's headers (Triton's restricted APIs) and passes on from them to the
    model (Triton's header forwarding: names matching the pattern become request parameters)."""

    restrictions: tuple[Restriction, ...] = ()
    forward_pattern: str = ""  # a regular expression, case-insensitive unless it starts with (?-i); "": none


def _restrictions(entries: list[str], source: str, flag: str, kind: str, prefix: str) -> tuple[Restriction, ...]:
    """Triton's `<categories>:<key>=<value>` groups, checked as its parser checks them (one group per category)."""
    groups: list[Restriction] = []
    seen: set[str] = set()
    for entry in entries:
        names, colon, setting = entry.partition(":")
        key, equals, value = setting.partition("=")
        if not colon or not equals or not names or not key or not value:
            raise SettingError(
                f"--{flag} option format is '<config name>:<setting>=<value>'. Got {entry} (in {source})"
            )
        categories = frozenset(name.strip().lower() for name in names.split(","))
        for category in sorted(categories):
            if category not in RESTRICTED_CATEGORIES:
                raise SettingError(
                    f"unknown restricted {kind} '{category}' in {source} (known: {', '.join(RESTRICTED_CATEGORIES)})"
                )
            if category in seen:
                raise SettingError(
                    f"restricted {kind} '{category}' can not be specified in multiple config groups ({source})"
                )
        seen |= categories
        header = prefix + key.strip().lower()
        if not set(header) <= _HEADER_NAME_CHARS or header.endswith("-bin") or header.startswith("grpc-"):
            raise SettingError(f"{source}: header '{key}' must be letters, digits, '-', '_' or '.' (not -bin, grpc-)")
        if header == "authorization":
            raise SettingError(f"{source}: the header 'authorization' carries API tokens; restrict with another one")
        if not value.isascii() or not value.isprintable() or value != value.strip() or " " in value:
            raise SettingError(f"{source}: the value for '{header}' must be printable ASCII without spaces")
        groups.append(Restriction(categories, header, value))
    return tuple(groups)


def compile_forward_pattern(pattern: str) -> re.Pattern[str]:
    """A header forward pattern as Triton reads it: case-insensitive (header names are), unless it starts with
    `(?-i)`; it matches anywhere in a name (use ^...$ for whole names)."""
    if pattern.startswith("(?-i)"):
        return re.compile(pattern.removeprefix("(?-i)"))
    return re.compile(pattern, re.IGNORECASE)


def _forward_pattern(name: str, pattern: str) -> str:
    try:
        compile_forward_pattern(pattern)
    except re.error as exc:
        raise SettingError(f"{name} is not a valid regular expression: {exc} in {pattern!r}") from None
    return pattern


def read_header_rules(
    env: Mapping[str, str], protocol: str, restricted: list[str] | None = None, forward_pattern: str | None = None
) -> HeaderRules:
    """HTTP's (INFERA_HTTP_RESTRICTED_API, INFERA_HTTP_HEADER_FORWARD_PATTERN) or gRPC's
    (INFERA_GRPC_RESTRICTED_PROTOCOL, INFERA_GRPC_HEADER_FORWARD_PATTERN) header rules; `restricted` and
    `forward_pattern` are `serve`'s flags, in place of the variables (both set is an error, not a choice)."""
    grpc = protocol == "grpc"
    flag = "grpc-restricted-protocol" if grpc else "http-restricted-api"
    variable = f"INFERA_{flag.upper().replace('-', '_')}"
    direct = (read_text(variable, env) or "").replace(";", " ").split()
    if direct and restricted is not None:
        raise SettingError(f"{variable} and --{flag} are both set; set one")
    source = f"--{flag}" if restricted is not None else variable
    kind = "protocol" if grpc else "api"
    prefix = GRPC_RESTRICTED_HEADER_PREFIX if grpc else ""
    groups = _restrictions(restricted if restricted is not None else direct, source, flag, kind, prefix)
    pattern_variable = f"INFERA_{protocol.upper()}_HEADER_FORWARD_PATTERN"
    pattern = read_text(pattern_variable, env) or ""
    if pattern and forward_pattern is not None:
        raise SettingError(f"{pattern_variable} and --{protocol}-header-forward-pattern are both set; set one")
    if forward_pattern is not None:
        pattern, pattern_variable = forward_pattern, f"--{protocol}-header-forward-pattern"
    return HeaderRules(groups, _forward_pattern(pattern_variable, pattern) if pattern else "")
