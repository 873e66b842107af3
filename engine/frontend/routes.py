"""Triton's HTTP paths, matched with plain string operations (no regular expression per request)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import InvalidArgument

GET = "GET"
POST = "POST"
GET_OR_POST = "GET,POST"
HEALTH_ENDPOINTS = frozenset({"health_live", "health_ready"})
# endpoints that change what the server serves
REPOSITORY_CHANGES = frozenset({"repository_load", "repository_unload"})
# endpoints an HTTP server may answer past ASGI once it has read a small body itself (V2App.direct_route): the
# requests and probes that come again and again, each answered in one piece (never a stream)
DIRECT_ENDPOINTS = frozenset(
    {"infer", "health_live", "health_ready", "model_ready", "server_metadata", "model_metadata"}
)
# endpoint under /v2/models/{m}[/versions/{v}]/<action> -> its method
_MODEL_ACTIONS = {"ready": GET, "config": GET, "stats": GET, "infer": POST, "generate": POST, "generate_stream": POST}
_REQUESTS = frozenset({"infer", "generate", "generate_stream"})  # endpoints named as they are, not model_<action>


@dataclass(frozen=True, slots=True)
class Route:
    """What a path asks for: an endpoint name, the method(s) it takes, and the model (or region) and version."""

    endpoint: str
    method: str
    model: str | None = None
    version: str | None = None

    def allows(self, method: str) -> bool:
        return method == self.method or method in self.method.split(",")


# paths up to this long are resolved once and remembered (a server sees a few paths per model, again and again),
# up to this many paths (then the memory starts over: a client walking random paths cannot grow it)
CACHED_PATH_CHARS = 256
CACHED_PATHS = 4096
_remembered: dict[str, Route | None] = {}


def resolve(path: str) -> Route | None:
    """The route of a `/v2/...` path, or None when no endpoint lives there."""
    try:
        return _remembered[path]
    except KeyError:
        pass
    route = _route(path)
    if len(path) <= CACHED_PATH_CHARS:
        if len(_remembered) >= CACHED_PATHS:
            _remembered.clear()
        _remembered[path] = route
    return route


def _route(path: str) -> Route | None:
    parts = path.split("/")
    if parts and parts[0] == "":
        parts = parts[1:]
    if parts and parts[-1] == "" and len(parts) > 1:
        parts = parts[:-1]
    if not parts or parts[0] != "v2":
        return None
    count = len(parts)
    if count == 1:
        return Route("server_metadata", GET)
    area = parts[1]
    if area == "models" and count >= 3:
        return _model_route(parts[2:])
    if area == "health" and count == 3 and parts[2] in ("live", "ready"):
        return Route("health_" + parts[2], GET)
    if area in ("systemsharedmemory", "cudasharedmemory"):
        return _shared_memory_route(area.removesuffix("sharedmemory"), parts[2:])
    if area == "trace" and parts[2:] == ["setting"]:
        return Route("trace_setting", GET_OR_POST)
    if area == "logging" and count == 2:
        return Route("logging", GET_OR_POST)
    if area == "repository":
        if count == 3 and parts[2] == "index":
            return Route("repository_index", POST)
        if count == 5 and parts[2] == "models" and parts[4] in ("load", "unload"):
            return Route("repository_" + parts[4], POST, model=parts[3])
    return None


def _shared_memory_route(kind: str, parts: list[str]) -> Route | None:
    """/v2/{system,cuda}sharedmemory[/region/{r}]/status|register|unregister; `model` carries the region."""
    region = None
    if len(parts) == 3 and parts[0] == "region":
        region, parts = parts[1], parts[2:]
    if len(parts) != 1:
        return None
    action = parts[0]
    if action == "status":
        return Route(f"{kind}_shm_status", GET, region)
    if action == "unregister" or (action == "register" and region is not None):
        return Route(f"{kind}_shm_{action}", POST, region)
    return None


def _model_route(parts: list[str]) -> Route | None:
    """Routes under /v2/models/: stats of every model, or one model's metadata, readiness, config, stats, infer."""
    if parts == ["stats"]:
        return Route("stats", GET)
    model, rest = parts[0], parts[1:]
    version = None
    if rest and rest[0] == "versions":
        if len(rest) < 2:
            return None
        version, rest = rest[1], rest[2:]
    if not rest:
        return Route("model_metadata", GET, model, version)
    if rest == ["trace", "setting"]:
        return Route("trace_setting", GET_OR_POST, model, version)
    if len(rest) == 1 and rest[0] in _MODEL_ACTIONS:
        action = rest[0]
        return Route(action if action in _REQUESTS else "model_" + action, _MODEL_ACTIONS[action], model, version)
    return None


def parse_version(text: str | None) -> int | None:
    """A version from the path as a number; anything but digits is the client's error."""
    if text is None or text == "":
        return None
    if not text.isdigit() or not text.isascii():
        raise InvalidArgument(f"model version '{text}' is not a positive integer")
    return int(text)
