"""Triton's restricted APIs and header forwarding, applied the same way by the HTTP and gRPC front ends.

A restricted category (`--http-restricted-api`, `--grpc-restricted-protocol`; HeaderRules in
engine/environment/headers.py) needs its header with its exact value on every request of its endpoints, before anything
else is looked at: the caller's credential is still needed after it (the two compose, neither stands in for the other),
and a request without the header gets Triton's refusal (HTTP 403 "This API is restricted, ...", gRPC UNAVAILABLE "This
protocol is restricted, ...").
`CATEGORY` is the one map of endpoints (HTTP) and methods (gRPC) to categories.

Forwarded headers (names matching the forward pattern) become string parameters of an inference request, after its
own (a header wins over a parameter of the same name, as a python model reads Triton's); a reserved name is refused
as Triton refuses it. Credentials never reach model code: `authorization`, `proxy-authorization`, `cookie` and the
restricted headers themselves are never forwarded, whatever the pattern.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from engine.environment.headers import HeaderRules, compile_forward_pattern
from engine.errors import InvalidArgument

_SHM_HTTP = tuple(
    f"{kind}_shm_{action}" for kind in ("system", "cuda") for action in ("status", "register", "unregister")
)
_SHM_GRPC = tuple(
    f"{kind}SharedMemory{act}" for kind in ("System", "Cuda") for act in ("Status", "Register", "Unregister")
)
# category -> (its HTTP endpoints, engine/frontend/routes.py; its gRPC methods), as Triton places them
_MEMBERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "health": (
        ("health_live", "health_ready", "model_ready"),
        ("ServerLive", "ServerReady", "ModelReady", "Check", "Watch"),
    ),
    "metadata": (("server_metadata", "model_metadata"), ("ServerMetadata", "ModelMetadata")),
    "inference": (("infer", "generate", "generate_stream"), ("ModelInfer", "ModelStreamInfer")),
    "shared-memory": (_SHM_HTTP, _SHM_GRPC),
    "model-config": (("model_config",), ("ModelConfig",)),
    "model-repository": (
        ("repository_index", "repository_load", "repository_unload"),
        ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"),
    ),
    "statistics": (("stats", "model_stats"), ("ModelStatistics",)),
    "trace": (("trace_setting",), ("TraceSetting",)),
    "logging": (("logging",), ("LogSettings",)),
}
CATEGORY = {member: category for category, sides in _MEMBERS.items() for side in sides for member in side}
# never forwarded to model code, whatever the pattern: they carry credentials
NEVER_FORWARDED = frozenset({"authorization", "proxy-authorization", "cookie"})
# Triton's reserved parameter names (and any starting with triton_): a header of that name is refused, not forwarded
RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "headers", "binary_data_output"}
)

Headers = Iterable[tuple[str | bytes, str | bytes]]


class HeaderCheck:
    """One front end's header rules, ready for each request: `refusal(endpoint, headers)`, `forwarded(headers)`."""

    def __init__(self, rules: HeaderRules, refusal_text: str) -> None:
        self.required: dict[str, tuple[str, bytes]] = {}  # endpoint or method -> (header, value)
        for restriction in rules.restrictions:
            for member, category in CATEGORY.items():
                if category in restriction.categories:
                    self.required[member] = (restriction.header, restriction.value.encode())
        self.refusal_text = refusal_text
        self.pattern = compile_forward_pattern(rules.forward_pattern) if rules.forward_pattern else None
        self.kept_back = NEVER_FORWARDED | {restriction.header for restriction in rules.restrictions}

    def refusal(self, endpoint: str, headers: Headers) -> str | None:
        """Triton's refusal when `endpoint` is restricted and its header is missing or wrong; else None."""
        required = self.required.get(endpoint)
        if required is None:
            return None
        header, value = required
        for name, sent in headers:
            if _text(name) == header:
                return None if hmac.compare_digest(_raw(sent), value) else self.refusal_text + f"'{header}'"
        return self.refusal_text + f"'{header}'"

    def forwarded(self, headers: Headers) -> dict[str, str]:
        """The headers that become request parameters (none without a pattern); InvalidArgument for a reserved one."""
        pattern = self.pattern
        if pattern is None:
            return {}
        found: dict[str, str] = {}
        for name, value in headers:
            key = _text(name).lower()
            if key in self.kept_back or not pattern.search(key):
                continue
            if isinstance(name, str) and isinstance(value, bytes):
                continue  # gRPC binary metadata (a -bin key): bytes, not text
            if key in RESERVED_PARAMETERS or key.startswith("triton_"):
                raise InvalidArgument(f"Header '{key}' is reserved for Triton usage and cannot be forwarded.")
            found[key] = _text(value)
        return found


def _text(value: str | bytes) -> str:
    """A header's name or value as text: UTF-8 as clients send it, else Latin-1 (HTTP's own)."""
    if isinstance(value, str):
        return value
    try:
        return value.decode()
    except UnicodeDecodeError:
        return value.decode("latin-1")


def _raw(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("latin-1", "replace")


HTTP_REFUSAL = "This API is restricted, expecting header "  # Triton's, answered with 403
GRPC_REFUSAL = "This protocol is restricted, expecting header "  # Triton's, answered with UNAVAILABLE
