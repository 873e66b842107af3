"""The v2 endpoints on the engine facade: each takes the parsed request and returns a Reply."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from engine.config.model_config import ModelConfig
from engine.errors import InferaError, InvalidArgument
from engine.frontend import extensions, generate_budgets
from engine.frontend.generate import StreamReply, answer_once, generate_request, stream_reply
from engine.frontend.repository_load import (
    RepositoryControl,
    check_load_name,
    load_model,
    parse_load_request,
    unload_model,
)
from engine.frontend.routes import Route, parse_version
from engine.llm.budgets import BudgetGate
from engine.protocol import (
    ConfigChoice,
    choose_response_encoding,
    compress_body,
    decode_infer_request,
    decompress_body,
    encode_infer_response,
    parse_header_length,
    parse_json_object,
)
from engine.protocol.shared_memory import CallerRegions, CopyOffLoop
from engine.serving.admission import ANONYMOUS, Principal, may_not_change
from engine.serving.server import EXTENSIONS, InferenceServer, RequestKey, VersionRoute
from engine.serving.streams import ResponseStream
from engine.types import InferenceRequest

JSON = b"application/json"
OCTET_STREAM = b"application/octet-stream"
# bodies up to this size decode on the event loop (cheaper than a thread hop); larger ones on a worker thread
DECODE_ON_LOOP_BYTES = 256 * 1024


@dataclass(slots=True)
class Incoming:
    """The parts of an HTTP request the endpoints read."""

    route: Route
    body: bytes
    content_encoding: str | None = None
    accept_encoding: str | None = None
    header_length: bytes | None = None
    max_body_bytes: int = 0
    repository_control: RepositoryControl | None = None
    scope: Any = None
    principal: Principal = ANONYMOUS
    method: str = "GET"
    forwarded: dict[str, str] | None = None  # headers forwarded as request parameters (header_rules.py)
    budgets: BudgetGate | None = None  # the callers' token budgets, held on generate (generate_budgets.py)


@dataclass(slots=True)
class Reply:
    """An HTTP answer: status, body and the headers beyond content-type and content-length."""

    status: int = 200
    body: bytes = b""
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


EMPTY_OK = Reply(200, b"", b"text/plain")
EMPTY_BAD = Reply(400, b"", b"text/plain")
GOING_AWAY = Reply(503, b"", b"text/plain")


def _json(value: Any) -> Reply:
    return Reply(200, orjson.dumps(value))


def server_metadata(server: InferenceServer, incoming: Incoming) -> Reply:
    return _json({"name": server.name, "version": server.version, "extensions": EXTENSIONS})


def health_live(server: InferenceServer, incoming: Incoming) -> Reply:
    return EMPTY_OK if server.is_live() else EMPTY_BAD


def health_ready(server: InferenceServer, incoming: Incoming) -> Reply:
    """200 when ready; 400 while loading (as Triton); 503 while draining for a shutdown or after a start-up that
    failed, so that a load balancer tells "going away" or "broken" from "not up yet" and sends no traffic."""
    if server.draining or server.startup_failure is not None:
        return GOING_AWAY
    return EMPTY_OK if server.is_ready() else EMPTY_BAD


def model_metadata(server: InferenceServer, incoming: Incoming) -> Reply:
    route = incoming.route
    return _json(server.model_metadata(route.model, parse_version(route.version)))


def model_ready(server: InferenceServer, incoming: Incoming) -> Reply:
    route = incoming.route
    return EMPTY_OK if server.model_ready(route.model, parse_version(route.version)) else EMPTY_BAD


def model_config(server: InferenceServer, incoming: Incoming) -> Reply:
    route = incoming.route
    return _json(server.model_config_dict(route.model, parse_version(route.version)))


def stats(server: InferenceServer, incoming: Incoming) -> Reply:
    route = incoming.route
    return _json(server.statistics(route.model, parse_version(route.version)))


class _Routing:
    """A request's route, chosen by the server's traffic router once its body's parameters are read."""

    __slots__ = ("route", "server", "model", "version")

    def __init__(self, server: InferenceServer, model: str, version: int | None) -> None:
        self.server = server
        self.model = model
        self.version = version
        self.route: VersionRoute | None = None

    def config_of(self, parameters: Any) -> ModelConfig:
        """The config of the version the request runs on (a ConfigChoice for the decoder, on the event loop)."""
        self.route = self.server.route(RequestKey.of(self.model, self.version, parameters))
        return self.route.served.config

    def config_from_thread(self, loop: asyncio.AbstractEventLoop) -> ConfigChoice:
        """`config_of` for a decoder on a worker thread: the router reads the model manager, which changes on the
        loop only, so the choice is made there while the thread waits."""

        def choose(parameters: Any) -> ModelConfig:
            chosen: concurrent.futures.Future[ModelConfig] = concurrent.futures.Future()

            def on_loop() -> None:
                try:
                    chosen.set_result(self.config_of(parameters))
                except BaseException as exc:  # noqa: BLE001 - handed to the thread, which raises it
                    chosen.set_exception(exc)

            loop.call_soon_threadsafe(on_loop)
            return chosen.result()

        return choose

    def refused(self, protocol: str = "http") -> None:
        """A request refused before queueing is still a failed request (as Triton), of the version it was routed
        to (one refused before it was routed, its body malformed, counts on the version it would have run on)."""
        if self.route is None:
            self.route = self.server.route(RequestKey(self.model, self.version))
        self.route.served.stats.record_failure(0, protocol=protocol)


def _decode(
    incoming: Incoming, config: ModelConfig | ConfigChoice, version: int | None, shared_memory: CallerRegions
) -> InferenceRequest:
    body = incoming.body
    if incoming.content_encoding is not None:
        body = decompress_body(body, incoming.content_encoding, incoming.max_body_bytes)
    header_length = incoming.header_length
    return decode_infer_request(
        body,
        parse_header_length(header_length) if header_length is not None else None,
        config,
        model_name=incoming.route.model,
        model_version=version,
        shared_memory=shared_memory,
    )


async def infer(server: InferenceServer, incoming: Incoming) -> Reply:
    """Route the request once, decode it against its version's config, run it there, encode what the client asked
    for.

    A large body is decoded on a worker thread, so one request's megabytes never stall the event loop (health
    probes, the console, every other model).
    """
    off_loop = len(incoming.body) > DECODE_ON_LOOP_BYTES or bool(incoming.content_encoding)
    # the caller's own shared memory regions, and no one else's, held until the answer is written
    regions = server.shared_memory.of(incoming.principal, on_loop=not off_loop)
    try:
        return await _infer_with(server, incoming, regions, off_loop)
    finally:
        regions.release()  # a region unregistered meanwhile goes now, as in Triton


async def _infer_with(server: InferenceServer, incoming: Incoming, regions: CallerRegions, off_loop: bool) -> Reply:
    started = time.monotonic_ns()
    route = incoming.route
    version = parse_version(route.version) if route.version is not None else None
    routing = _Routing(server, route.model, version)
    try:
        if off_loop:
            from_thread = routing.config_from_thread(asyncio.get_running_loop())
            request = await asyncio.to_thread(_decode, incoming, from_thread, version, regions)
        else:
            try:
                request = _decode(incoming, routing.config_of, version, regions)
            except CopyOffLoop:  # a small body naming more shared memory than the loop should copy
                config = routing.route.served.config  # type: ignore[union-attr]  # routed before any copy
                request = await asyncio.to_thread(_decode, incoming, config, version, regions)
    except InferaError:
        routing.refused()
        raise
    if incoming.forwarded:
        request.parameters.update(incoming.forwarded)  # after the body's own, as Triton adds them
    chosen: VersionRoute = routing.route  # a decoded request has been routed
    served = chosen.served
    trace = request.trace = server.tracer.start(route.model, served.version)
    if trace is not None:
        trace.mark("REQUEST_START", started)
        trace.record_tensors("TENSOR_QUEUE_INPUT", request.inputs)
    response = await server.infer(request, chosen)
    batched = served.config.max_batch_size > 0
    regions.start_on_loop()
    try:
        payload, header_length = encode_infer_response(response, request, batched=batched, shared_memory=regions)
    except CopyOffLoop:  # outputs into shared memory, more than the loop should copy
        payload, header_length = await asyncio.to_thread(
            encode_infer_response, response, request, batched=batched, shared_memory=regions
        )
    if trace is not None:
        trace.mark("REQUEST_END")
        trace.record_tensors("TENSOR_BACKEND_OUTPUT", response.outputs)
        await server.tracer.finish(trace)  # written off the loop; dropped (not waited on) when the writer is behind
    if header_length is None and incoming.accept_encoding is None:
        return Reply(200, payload)  # JSON, uncompressed
    reply = Reply(200, payload)
    if header_length is not None:
        reply.content_type = OCTET_STREAM
        reply.headers.append((b"inference-header-content-length", str(header_length).encode()))
    encoding = choose_response_encoding(incoming.accept_encoding)
    if encoding is not None:
        reply.body = compress_body(payload, encoding)
        reply.headers.append((b"content-encoding", encoding.encode()))
    return reply


async def _start_generate(server: InferenceServer, incoming: Incoming) -> tuple[InferenceRequest, ResponseStream]:
    """Route a generate body once, decode it against its version's config, hold it to the caller's budgets and start
    it there; a refusal counts as a failure."""
    route = incoming.route
    version = parse_version(route.version)
    routing = _Routing(server, route.model, version)
    try:
        body = decompress_body(incoming.body, incoming.content_encoding, incoming.max_body_bytes)
        request = generate_request(body, routing.config_of, route.model, version, incoming.max_body_bytes)
        admission = await generate_budgets.admit(incoming.budgets, incoming.principal, request)
    except InferaError:
        routing.refused()
        raise
    if admission is None:
        return request, await server.infer_stream(request, routing.route)
    try:
        stream = await server.infer_stream(request, routing.route)
    except BaseException:
        await admission.settle(None)
        raise
    return request, generate_budgets.BudgetedStream(stream, admission)  # type: ignore[return-value] - read alike


async def generate(server: InferenceServer, incoming: Incoming) -> Reply:
    """Triton's `/generate`: exactly one response, as one JSON object."""
    request, stream = await _start_generate(server, incoming)
    return Reply(200, await answer_once(stream, incoming.route.model, request))


async def generate_stream(server: InferenceServer, incoming: Incoming) -> StreamReply:
    """Triton's `/generate_stream`: every response as a server-sent event, as the model sends it."""
    request, stream = await _start_generate(server, incoming)
    return await stream_reply(stream, incoming.route.model, request)


def _optional_json(incoming: Incoming) -> dict[str, Any]:
    """A management body that may be empty; when present it must be a JSON object."""
    body = decompress_body(incoming.body, incoming.content_encoding, incoming.max_body_bytes)
    if not body.strip():
        return {}
    return parse_json_object(body)


def _parameters(document: dict[str, Any]) -> dict[str, Any]:
    parameters = document.get("parameters", {})
    if not isinstance(parameters, dict):
        raise InvalidArgument("'parameters' must be a JSON object")
    return parameters


def repository_index(server: InferenceServer, incoming: Incoming) -> Reply:
    ready = _optional_json(incoming).get("ready", False)
    if not isinstance(ready, bool):
        raise InvalidArgument("'ready' must be true or false")
    return _json(server.repository_index(ready_only=ready))


async def repository_load(server: InferenceServer, incoming: Incoming) -> Reply:
    """Load or reload a model, with Triton's `config` override and `file:<version>/<name>` contents (parsed as gRPC
    parses them, engine/frontend/repository_load.py)."""
    name = check_load_name(incoming.route.model)
    request = parse_load_request(name, _parameters(_optional_json(incoming)))
    await load_model(server, incoming.repository_control, request, incoming.principal)
    return EMPTY_OK


async def repository_unload(server: InferenceServer, incoming: Incoming) -> Reply:
    name = check_load_name(incoming.route.model)
    _parameters(_optional_json(incoming))
    await unload_model(server, incoming.repository_control, name, incoming.principal)
    return EMPTY_OK


# ---- shared memory, trace, logging (extensions.py; the gRPC front end answers the same way)


def _shared_memory_status(kind: str) -> Any:
    def handler(server: InferenceServer, incoming: Incoming) -> Reply:
        return _json(extensions.shared_memory_status(server, kind, incoming.route.model, incoming.principal))

    return handler


def _shared_memory_register(kind: str) -> Any:
    def handler(server: InferenceServer, incoming: Incoming) -> Reply:
        details = _optional_json(incoming)
        extensions.register_shared_memory(server, kind, incoming.route.model or "", details, incoming.principal)
        return EMPTY_OK

    return handler


def _shared_memory_unregister(kind: str) -> Any:
    def handler(server: InferenceServer, incoming: Incoming) -> Reply:
        extensions.unregister_shared_memory(server, kind, incoming.route.model, incoming.principal)
        return EMPTY_OK

    return handler


def trace_setting(server: InferenceServer, incoming: Incoming) -> Reply:
    model = incoming.route.model
    if incoming.method == "POST":
        if not incoming.principal.may_change_models:
            raise may_not_change(incoming.principal, "tracing")
        return _json(extensions.update_trace_settings(server, _optional_json(incoming), model))
    return _json(extensions.trace_settings(server, model))


def logging_settings(server: InferenceServer, incoming: Incoming) -> Reply:
    if incoming.method == "POST":
        if not incoming.principal.may_change_models:
            raise may_not_change(incoming.principal, "logging")
        return _json(server.log_settings.update(_optional_json(incoming)))
    return _json(server.log_settings.to_dict())


SYNC_HANDLERS = {
    "server_metadata": server_metadata,
    "health_live": health_live,
    "health_ready": health_ready,
    "model_metadata": model_metadata,
    "model_ready": model_ready,
    "model_config": model_config,
    "model_stats": stats,
    "stats": stats,
    "repository_index": repository_index,
    "trace_setting": trace_setting,
    "logging": logging_settings,
    **{f"{kind}_shm_status": _shared_memory_status(kind) for kind in ("system", "cuda")},
    **{f"{kind}_shm_register": _shared_memory_register(kind) for kind in ("system", "cuda")},
    **{f"{kind}_shm_unregister": _shared_memory_unregister(kind) for kind in ("system", "cuda")},
}
ASYNC_HANDLERS = {
    "infer": infer,
    "generate": generate,
    "generate_stream": generate_stream,
    "repository_load": repository_load,
    "repository_unload": repository_unload,
}
