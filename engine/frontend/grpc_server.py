"""Triton's gRPC front end: `inference.GRPCInferenceService` on a grpc.aio server in the engine's event loop.

A peer of the HTTP front end: the same InferenceServer, the same decoder (protocol/grpc_codec.py turns a
ModelInferRequest into the HTTP document), the same authenticator (a token in the `authorization` metadata), the
same repository control and the same errors, mapped to gRPC status codes as Triton maps its error kinds. Also served:
grpc.health.v1 (the server, and each model by its name) and server reflection.

Nothing big before authentication: `CallGate` (grpc_calls.py), a server interceptor, authenticates each call on its
metadata before its message is read (a refused call's message is never received, inflated or parsed) and binds the
principal it found to the call's handler. Messages are limited to `max_message_bytes` after decompression (grpc
core stops inflating there), parsed in the handler (a corrupt one answers INVALID_ARGUMENT), and each caller's
calls in flight are counted (caller_limits.py). A stream re-checks its credential with every message, and stops
reading while its client does not read its answers. Health checks and watchers: grpc_health_service.py; the
repository, shared memory, trace and log calls: grpc_management.py.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import json_format

from engine.config.text_format import config_to_dict
from engine.errors import InferaError, Unauthorized
from engine.frontend import generate_budgets
from engine.frontend.caller_limits import CallerLimits, caller_key
from engine.frontend.grpc_binding import enable_reflection, refuse_a_taken_port
from engine.frontend.grpc_calls import Binder, Call, CallGate, parsed, parsed_stream, peer_host, refusal, status_code
from engine.frontend.grpc_health_service import HEALTH_METHODS, HealthService
from engine.frontend.grpc_management import ManagementCalls
from engine.frontend.header_rules import GRPC_REFUSAL, HeaderCheck
from engine.frontend.repository_load import RepositoryControl
from engine.frontend.routes import parse_version
from engine.llm.budgets import BudgetGate
from engine.proto import grpc_messages as messages
from engine.protocol.grpc_codec import (
    decode_grpc_request,
    encode_grpc_response,
    parameters_of,
    set_parameter,
)
from engine.protocol.shared_memory import CallerRegions
from engine.serving.admission import ANONYMOUS, Principal
from engine.serving.server import EXTENSIONS, RequestKey, VersionRoute
from engine.serving.streams import ResponseStream
from engine.settings import GrpcSettings
from engine.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer

log = logging.getLogger("infera.frontend")

# a message's route, its request, when it began (ns), and the caller's shared memory regions it holds until answered
Decoded = tuple[VersionRoute, InferenceRequest, int, CallerRegions]

Authenticate = Callable[[dict[str, Any]], Awaitable[Principal]]
# requests whose raw contents are larger than this decode on a worker thread (as HTTP bodies do)
DECODE_ON_LOOP_BYTES = 256 * 1024
# the server's own probes, as /v2/health/*; a model's readiness needs a token where /v2/models/<m>/ready does
OPEN_METHODS = frozenset({"ServerLive", "ServerReady"})
INFERENCE_METHODS = frozenset({"ModelInfer", "ModelStreamInfer"})  # their metadata may be forwarded as parameters
# grpc.aio servers sharing the port (SO_REUSEPORT, grpc's default): a grpc.aio server accepts one call at a time
# (its next call is asked for once the loop has taken the last one), so a single server delivers calls to the loop
# one by one and the batcher sees batches of one or two; four accept four at a time. The kernel spreads connections
# over them (issue 38: the mean batch at 64 connections went from 1.9 to 3.8; docs/benchmarks.md has the figures)
ACCEPTORS = 4
COMPRESSION = {
    "none": grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}


class GrpcFrontEnd(ManagementCalls):
    """The gRPC server of one InferenceServer: start it on the running loop, stop it gracefully."""

    def __init__(
        self,
        server: InferenceServer,
        settings: GrpcSettings,
        *,
        host: str = "127.0.0.1",
        authenticate: Authenticate | None = None,
        repository_control: RepositoryControl | None = None,
        budgets: BudgetGate | None = None,
    ) -> None:
        self.server = server
        self.settings = settings
        self.budgets = budgets  # the callers' token budgets, held on streams as on /v1 and generate
        self.host = host
        self.authenticate = authenticate
        self.repository_control = repository_control
        opened, code = server.settings.open_repository_control, server.settings.anonymous_may_load_code
        self.anonymous = Principal(ANONYMOUS.name, may_change_models=opened, may_load_code=code)
        self.port: int | None = None
        self._grpc: list[grpc.aio.Server] = []  # ACCEPTORS servers on one port
        self.caller_limits = CallerLimits(server.settings.max_concurrent_per_caller)
        self.health = HealthService(server, settings)
        self.headers = HeaderCheck(server.settings.grpc_headers, GRPC_REFUSAL)

    # ---- life

    async def start(self) -> int:
        """Listen on host:port (port 0: any free one) and serve; returns the port."""
        limit = self.settings.max_message_bytes
        options = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.keepalive_time_ms", self.settings.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.settings.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", int(self.settings.keepalive_permit_without_calls)),
            ("grpc.http2.max_pings_without_data", self.settings.http2_max_pings_without_data),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", self.settings.min_recv_ping_interval_ms),
            ("grpc.http2.max_ping_strikes", self.settings.max_ping_strikes),
        ]
        gate = CallGate({**self._inference_binders(), **self.health.binders(self._binder)})
        port = self.settings.port
        if port and not self.settings.port_shared:
            refuse_a_taken_port(self.host, port)
        servers: list[grpc.aio.Server] = []
        try:
            for _ in range(ACCEPTORS):
                server = grpc.aio.server(
                    options=options, compression=COMPRESSION[self.settings.response_compression], interceptors=[gate]
                )
                enable_reflection(server)
                address = f"[{self.host}]:{port}" if ":" in self.host else f"{self.host}:{port}"
                port = server.add_insecure_port(address)  # the first binds (port 0: any free one), the rest share
                await server.start()
                servers.append(server)
        except BaseException:
            await asyncio.gather(*(server.stop(None) for server in servers))
            raise
        self._grpc, self.port = servers, port
        log.info("gRPC (inference.GRPCInferenceService) listening on %s:%s", self.host, self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking calls and let in-flight ones finish for `grace` seconds (the setting's, by default)."""
        servers, self._grpc = self._grpc, []
        self.health.watchers.stop()
        grace = self.settings.shutdown_grace_seconds if grace is None else grace
        await asyncio.gather(*(server.stop(grace) for server in servers))

    # ---- wiring

    def _inference_binders(self) -> dict[str, Binder]:
        binders = {}
        for name, (request_class, response_class, client_streams, server_streams) in messages.method_types().items():
            implementation = getattr(self, f"rpc_{name}")
            if client_streams and server_streams:
                bind = self._streaming(name, implementation, request_class, response_class)
            else:
                bind = self._unary(name, implementation, request_class, response_class)
            binders[f"/{messages.SERVICE}/{name}"] = self._binder(name, bind)
        return binders

    def _binder(self, name: str, bind: Callable[[Call], grpc.RpcMethodHandler]) -> Binder:
        forwards = name in INFERENCE_METHODS and self.headers.pattern is not None

        async def binder(metadata: Sequence[tuple[str, Any]]) -> grpc.RpcMethodHandler:
            if self.headers.required and (refused := self.headers.refusal(name, metadata)):
                return refusal(grpc.StatusCode.UNAVAILABLE, refused)  # Triton's restricted protocol: first
            try:
                principal = await self._principal(name, metadata)
                forwarded = self.headers.forwarded(metadata) if forwards else None
            except InferaError as exc:
                return refusal(status_code(exc), exc.message)
            recheck = None
            if principal is not None and principal.token_id is not None and self.authenticate is not None:
                recheck = functools.partial(self._authenticated, metadata)
            # principal None only for health
            return bind(Call(principal, recheck=recheck, forwarded=forwarded))  # type: ignore[arg-type]

        return binder

    def _unary(self, name: str, implementation: Callable, request_class: type, response_class: type) -> Callable:
        counted = name not in OPEN_METHODS

        def bind(call: Call) -> grpc.RpcMethodHandler:
            async def handle(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
                caller = None
                try:
                    request = parsed(request_class, raw)
                    if counted:
                        caller = self._enter(call, context)
                    return await implementation(request, call, response_class)
                except InferaError as exc:
                    await context.abort(status_code(exc), exc.message)
                except Exception as exc:  # a bug must still answer, and must not take the server down
                    log.exception("unexpected error in gRPC %s", name)
                    await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
                finally:
                    if caller is not None:
                        self.caller_limits.leave(caller)

            return grpc.unary_unary_rpc_method_handler(handle, response_serializer=response_class.SerializeToString)

        return bind

    def _streaming(self, name: str, implementation: Callable, request_class: type, response_class: type) -> Callable:
        def bind(call: Call) -> grpc.RpcMethodHandler:
            async def handle(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                call.peer = peer_host(context.peer())
                ended: list[InferaError] = []
                async for response in implementation(parsed_stream(request_class, raws), call, context, ended):
                    yield response
                if ended:  # the stream itself was refused (a revoked credential, a corrupt message)
                    await context.abort(status_code(ended[0]), ended[0].message)

            return grpc.stream_stream_rpc_method_handler(handle, response_serializer=response_class.SerializeToString)

        return bind

    def _enter(self, call: Call, context: grpc.aio.ServicerContext) -> Hashable:
        """Count one more call of this caller in flight (TooManyInFlight past the limit); its key, to leave."""
        principal = call.principal
        if principal.token_id is None and principal.user_id is None and not call.peer:
            call.peer = peer_host(context.peer())
        key = caller_key(principal, call.peer)
        self.caller_limits.enter(key)
        return key

    async def _principal(self, method: str, metadata: Sequence[tuple[str, Any]]) -> Principal | None:
        """Who makes a call, from its metadata; None for a health call without a token where tokens are needed."""
        if self.authenticate is None or method in OPEN_METHODS:
            return self.anonymous
        if method in HEALTH_METHODS and not any(key.lower() == "authorization" for key, _ in metadata):
            try:
                return await self._authenticated(metadata)  # anonymous where connections are open
            except Unauthorized:
                return None  # the server's own health stays open (Kubernetes probes); a model's needs a token
        return await self._authenticated(metadata)

    async def _authenticated(self, metadata: Sequence[tuple[str, Any]]) -> Principal:
        if self.authenticate is None:
            return self.anonymous
        headers = [
            (key.lower().encode("latin-1"), value.encode("latin-1"))
            for key, value in metadata
            if isinstance(value, str) and key.lower() == "authorization"
        ]
        return await self.authenticate({"type": "grpc", "headers": headers, "server": (self.host, self.port)})

    # ---- health, metadata, configuration, statistics

    async def rpc_ServerLive(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802 - Triton's names
        return response(live=self.server.is_live())

    async def rpc_ServerReady(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return response(ready=self.server.is_ready())

    async def rpc_ModelReady(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return response(ready=self.server.model_ready(request.name, parse_version(request.version)))

    async def rpc_ServerMetadata(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return response(name=self.server.name, version=self.server.version, extensions=EXTENSIONS)

    async def rpc_ModelMetadata(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return json_format.ParseDict(
            self.server.model_metadata(request.name, parse_version(request.version)), response()
        )

    async def rpc_ModelConfig(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        config = self.server.model_config(request.name, parse_version(request.version))
        answer = response()
        json_format.ParseDict(config_to_dict(config), answer.config, ignore_unknown_fields=True)
        return answer

    async def rpc_ModelStatistics(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        statistics = self.server.statistics(request.name or None, parse_version(request.version))
        return json_format.ParseDict(statistics, response(), ignore_unknown_fields=True)

    # ---- inference

    async def rpc_ModelInfer(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        decoded = await self._decoded(request, call.principal, call.forwarded)
        return await self._infer(request, call.principal, decoded)

    async def _infer(self, message: Any, principal: Principal, decoded: Decoded | None = None) -> Any:
        decoded = decoded if decoded is not None else await self._decoded(message, principal)
        try:
            return await self._answer(message.model_name, decoded)
        finally:
            decoded[3].release()  # a region unregistered meanwhile goes now, as in Triton

    async def _answer(self, model: str, decoded: Decoded) -> Any:
        route, request, started, regions = decoded
        served = route.served
        trace = request.trace = self.server.tracer.start(model, served.version)
        if trace is not None:
            trace.mark("REQUEST_START", started)
            trace.record_tensors("TENSOR_QUEUE_INPUT", request.inputs)
        result = await self.server.infer(request, route)
        batched = served.config.max_batch_size > 0
        answer = await regions.run(  # the caller's own regions; large copies off the loop
            functools.partial(
                encode_grpc_response,
                result,
                request,
                messages.ModelInferResponse,
                batched=batched,
                shared_memory=regions,
            )
        )
        if trace is not None:
            trace.mark("REQUEST_END")
            trace.record_tensors("TENSOR_BACKEND_OUTPUT", result.outputs)
            await self.server.tracer.finish(trace)
        return answer

    async def _decoded(self, message: Any, principal: Principal, forwarded: dict[str, str] | None = None) -> Decoded:
        """The request a message carries, routed once (by its parameters) and checked against its version's config
        (large ones off the loop); shared memory it names is looked up among the caller's own regions; metadata
        forwarded as parameters added after its own."""
        started = time.monotonic_ns()
        version = parse_version(message.model_version)
        parameters = parameters_of(message.parameters) if message.parameters else None
        route = self.server.route(RequestKey.of(message.model_name, version, parameters))
        served = route.served
        regions = self.server.shared_memory.of(principal)
        decode = functools.partial(
            decode_grpc_request,
            message,
            served.config,
            model_name=message.model_name,
            model_version=version,
            shared_memory=regions,
        )
        try:
            if sum(len(raw) for raw in message.raw_input_contents) > DECODE_ON_LOOP_BYTES:
                request = await asyncio.to_thread(decode)
            else:
                request = await regions.run(decode)  # on a worker thread if it copies much shared memory
        except InferaError:
            regions.release()
            served.stats.record_failure(0, protocol="grpc")  # refused before queueing: a failed request (as Triton)
            raise
        except BaseException:
            regions.release()
            raise
        request.protocol = "grpc"
        if forwarded:
            request.parameters.update(forwarded)  # after the message's own, as Triton adds them
        return route, request, started, regions

    async def _stream(
        self,
        message: Any,
        principal: Principal,
        decoded: Decoded,
        put: Callable[[Any], Awaitable[None]],
        open_streams: set,
    ) -> None:
        """A decoupled model's request on a stream: each of its responses as it comes, marked final or not (the
        flags-only final only when the request asked for it with triton_enable_empty_final_response)."""
        route, request, _, regions = decoded
        served = route.served
        empty_final = bool(request.parameters.get("triton_enable_empty_final_response", False))
        admission = None
        try:
            admission = await generate_budgets.admit(self.budgets, principal, request)
            stream = await self.server.infer_stream(request, route)
        except BaseException:
            regions.release()
            if admission is not None:
                await admission.settle(None)
            raise
        if admission is not None:
            stream = generate_budgets.BudgetedStream(stream, admission)  # type: ignore[assignment] - read alike
        open_streams.add(stream)
        try:
            async for response in stream:
                if response.error is not None:
                    await put(_stream_error(message, response.error.message))
                    continue
                if response.empty and not empty_final:
                    continue
                answered = InferenceResponse(
                    message.model_name,
                    stream.model_version,
                    response.outputs or {},
                    id=request.id,
                    parameters=response.parameters,
                )
                answer = await regions.run(
                    functools.partial(
                        encode_grpc_response,
                        answered,
                        request,
                        messages.ModelInferResponse,
                        batched=served.config.max_batch_size > 0,
                        shared_memory=regions,
                    )
                )
                set_parameter(answer.parameters["triton_final_response"], response.final)
                await put(messages.ModelStreamInferResponse(infer_response=answer))
        finally:
            open_streams.discard(stream)
            regions.release()

    async def rpc_ModelStreamInfer(  # noqa: N802
        self, requests: AsyncIterator[Any], call: Call, context: Any, ended: list[InferaError]
    ) -> AsyncIterator[Any]:
        """Requests and responses interleave: each request runs as soon as it arrives, each answer carries its id.

        A failed request answers in the stream's `error_message` and the stream goes on. Up to
        `stream_concurrency` requests of one stream run at once, and up to `stream_queue_responses` answers wait
        for the client to read them: past either, reading (and a decoupled model's stream) waits. A token's
        credential is checked again with every message; once it is revoked the stream ends (`ended`).
        """
        queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.settings.stream_queue_responses)
        slots = asyncio.Semaphore(self.settings.stream_concurrency)
        done = object()
        open_streams: set[ResponseStream] = set()  # a decoupled model's requests under way on this stream
        running: set[asyncio.Task[None]] = set()

        async def answer(message: Any, caller: Hashable) -> None:
            try:
                decoded = await self._decoded(message, call.principal, call.forwarded)
                if decoded[0].served.config.decoupled:
                    await self._stream(message, call.principal, decoded, queue.put, open_streams)
                else:
                    result = await self._infer(message, call.principal, decoded)
                    await queue.put(messages.ModelStreamInferResponse(infer_response=result))
            except InferaError as exc:
                await queue.put(_stream_error(message, exc.message))
            except Exception as exc:  # noqa: BLE001 - one request's bug must not end the stream
                log.exception("unexpected error in a gRPC stream request")
                await queue.put(_stream_error(message, f"internal error: {type(exc).__name__}: {exc}"))
            finally:
                self.caller_limits.leave(caller)
                slots.release()

        async def read() -> None:
            try:
                async for message in requests:
                    if call.recheck is not None:
                        await call.recheck()  # Unauthorized once the token is revoked or its user deactivated
                    await slots.acquire()
                    try:
                        caller = self._enter(call, context)
                    except InferaError as exc:
                        slots.release()
                        await queue.put(_stream_error(message, exc.message))
                        continue
                    task = asyncio.ensure_future(answer(message, caller))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if running:
                    await asyncio.gather(*running, return_exceptions=True)
            except InferaError as exc:
                ended.append(exc)
                for task in list(running):
                    task.cancel()
            finally:
                await queue.put(done)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await queue.get()) is not done:
                yield item
        finally:
            reader.cancel()
            for task in list(running):
                task.cancel()
            for stream in list(open_streams):  # the client went away: its models stop generating
                stream.cancel()


def _stream_error(message: Any, text: str) -> Any:
    failed = messages.ModelInferResponse(
        id=message.id, model_name=message.model_name, model_version=message.model_version
    )
    return messages.ModelStreamInferResponse(error_message=text, infer_response=failed)
