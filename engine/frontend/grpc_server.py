"""Triton's gRPC front end: `inference.GRPCInferenceService` on a grpc.aio server in the engine's event loop.

A peer of the HTTP front end: the same InferenceServer, the same decoder (protocol/grpc_codec.py turns a
ModelInferRequest into the HTTP document), the same authenticator (a token in the `authorization` metadata), the
same repository control and the same errors, mapped to gRPC status codes as Triton maps its error kinds. Also served:
grpc.health.v1 (the server, and each model by its name) and server reflection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import descriptor_pb2, json_format
from grpc_health.v1 import health_pb2

from engine.admission import ANONYMOUS, Principal, may_not_change
from engine.config_format import config_to_dict
from engine.errors import InferaError, InvalidArgument
from engine.frontend import extensions
from engine.frontend.handlers import RepositoryControl
from engine.frontend.routes import parse_version
from engine.names import check_model_name, normalise_files, sent_files
from engine.proto import grpc_messages as messages
from engine.protocol.grpc_codec import (
    decode_grpc_request,
    encode_grpc_response,
    parameter_value,
    parameters_of,
    set_parameter,
)
from engine.server import EXTENSIONS
from engine.settings import GrpcSettings
from engine.streams import ResponseStream
from engine.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from engine.lifecycle import ServedVersion
    from engine.server import InferenceServer

log = logging.getLogger("infera.frontend")

Authenticate = Callable[[dict[str, Any]], Awaitable[Principal]]
# requests whose raw contents are larger than this decode on a worker thread (as HTTP bodies do)
DECODE_ON_LOOP_BYTES = 256 * 1024
HEALTH_SERVICE = "grpc.health.v1.Health"
REFLECTION_SERVICES = ("grpc.reflection.v1alpha.ServerReflection", "grpc.reflection.v1.ServerReflection")
# Triton's error kinds, as this engine's HTTP statuses, to gRPC status codes
STATUS_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
}
OPEN_METHODS = frozenset({"ServerLive", "ServerReady", "ModelReady"})
COMPRESSION = {
    "none": grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}


def status_code(error: InferaError) -> grpc.StatusCode:
    return STATUS_CODES.get(error.status, grpc.StatusCode.UNKNOWN)


@dataclass
class Call:
    """What a handler knows of one call: who made it."""

    principal: Principal


class GrpcFrontEnd:
    """The gRPC server of one InferenceServer: start it on the running loop, stop it gracefully."""

    def __init__(
        self,
        server: InferenceServer,
        settings: GrpcSettings,
        *,
        host: str = "127.0.0.1",
        authenticate: Authenticate | None = None,
        repository_control: RepositoryControl | None = None,
    ) -> None:
        self.server = server
        self.settings = settings
        self.host = host
        self.authenticate = authenticate
        self.repository_control = repository_control
        opened = server.settings.open_repository_control
        self.anonymous = Principal(ANONYMOUS.name, may_change_models=opened, may_load_code=opened)
        self.port: int | None = None
        self._grpc: grpc.aio.Server | None = None

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
        server = grpc.aio.server(options=options, compression=COMPRESSION[self.settings.response_compression])
        server.add_generic_rpc_handlers((self._inference_handlers(), self._health_handlers()))
        _enable_reflection(server)
        address = f"[{self.host}]:{self.settings.port}" if ":" in self.host else f"{self.host}:{self.settings.port}"
        self.port = server.add_insecure_port(address)
        await server.start()
        self._grpc = server
        log.info("gRPC (inference.GRPCInferenceService) listening on %s:%s", self.host, self.port)
        return self.port

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking calls and let in-flight ones finish for `grace` seconds (the setting's, by default)."""
        server, self._grpc = self._grpc, None
        if server is not None:
            await server.stop(self.settings.shutdown_grace_seconds if grace is None else grace)

    # ---- wiring

    def _inference_handlers(self) -> grpc.GenericRpcHandler:
        handlers = {}
        for name, (request_class, response_class, client_streams, server_streams) in messages.method_types().items():
            implementation = getattr(self, f"rpc_{name}")
            if client_streams and server_streams:
                handlers[name] = grpc.stream_stream_rpc_method_handler(
                    self._streaming(name, implementation),
                    request_deserializer=request_class.FromString,
                    response_serializer=response_class.SerializeToString,
                )
            else:
                handlers[name] = grpc.unary_unary_rpc_method_handler(
                    self._unary(name, implementation, response_class),
                    request_deserializer=request_class.FromString,
                    response_serializer=response_class.SerializeToString,
                )
        return grpc.method_handlers_generic_handler(messages.SERVICE, handlers)

    def _unary(self, name: str, implementation: Callable, response_class: type) -> Callable:
        async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                call = Call(await self._principal(name, context))
                return await implementation(request, call, response_class)
            except InferaError as exc:
                await context.abort(status_code(exc), exc.message)
            except Exception as exc:  # a bug must still answer, and must not take the server down
                log.exception("unexpected error in gRPC %s", name)
                await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")

        return handle

    def _streaming(self, name: str, implementation: Callable) -> Callable:
        async def handle(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                call = Call(await self._principal(name, context))
            except InferaError as exc:
                await context.abort(status_code(exc), exc.message)
                return
            async for response in implementation(requests, call):
                yield response

        return handle

    async def _principal(self, method: str, context: grpc.aio.ServicerContext) -> Principal:
        if self.authenticate is None or method in OPEN_METHODS:
            return self.anonymous
        headers = [
            (key.lower().encode("latin-1"), value.encode("latin-1"))
            for key, value in (context.invocation_metadata() or ())
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
        return await self._infer(request, call.principal)

    async def _infer(self, message: Any, principal: Principal) -> Any:
        served, request, started = await self._decoded(message)
        trace = request.trace = self.server.tracer.start(message.model_name, served.version)
        if trace is not None:
            trace.mark("REQUEST_START", started)
            trace.record_tensors("TENSOR_QUEUE_INPUT", request.inputs)
        result = await self.server.infer(request)
        batched = served.config.max_batch_size > 0
        answer = encode_grpc_response(
            result, request, messages.ModelInferResponse, batched=batched, shared_memory=self.server.shared_memory
        )
        if trace is not None:
            trace.mark("REQUEST_END")
            trace.record_tensors("TENSOR_BACKEND_OUTPUT", result.outputs)
            await asyncio.to_thread(self.server.tracer.finish, trace)
        return answer

    async def _decoded(self, message: Any) -> tuple[ServedVersion, InferenceRequest, int]:
        """The request a message carries, checked against the served version's config (large ones off the loop)."""
        started = time.monotonic_ns()
        version = parse_version(message.model_version)
        served = self.server.get_model(message.model_name, version)
        decode = functools.partial(
            decode_grpc_request,
            message,
            served.config,
            model_name=message.model_name,
            model_version=version,
            shared_memory=self.server.shared_memory,
        )
        try:
            if sum(len(raw) for raw in message.raw_input_contents) > DECODE_ON_LOOP_BYTES:
                request = await asyncio.to_thread(decode)
            else:
                request = decode()
        except InferaError:
            served.stats.record_failure(0, protocol="grpc")  # refused before queueing: a failed request (as Triton)
            raise
        request.protocol = "grpc"
        return served, request, started

    async def _stream(self, message: Any, put: Callable[[Any], Awaitable[None]], open_streams: set) -> None:
        """A decoupled model's request on a stream: each of its responses as it comes, marked final or not (the
        flags-only final only when the request asked for it with triton_enable_empty_final_response)."""
        served, request, _ = await self._decoded(message)
        empty_final = bool(request.parameters.get("triton_enable_empty_final_response", False))
        stream = await self.server.infer_stream(request)
        open_streams.add(stream)
        try:
            async for response in stream:
                if response.error is not None:
                    await put(_stream_error(message, response.error.message))
                    continue
                if response.empty and not empty_final:
                    continue
                answered = InferenceResponse(
                    message.model_name, stream.model_version, response.outputs or {}, id=request.id
                )
                answer = encode_grpc_response(
                    answered,
                    request,
                    messages.ModelInferResponse,
                    batched=served.config.max_batch_size > 0,
                    shared_memory=self.server.shared_memory,
                )
                set_parameter(answer.parameters["triton_final_response"], response.final)
                await put(messages.ModelStreamInferResponse(infer_response=answer))
        finally:
            open_streams.discard(stream)

    async def rpc_ModelStreamInfer(self, requests: AsyncIterator[Any], call: Call) -> AsyncIterator[Any]:  # noqa: N802
        """Requests and responses interleave: each request runs as soon as it arrives, each answer carries its id.

        A failed request answers in the stream's `error_message` and the stream goes on. Up to
        `stream_concurrency` requests of one stream run at once; reading waits for a free slot.
        """
        queue: asyncio.Queue[Any] = asyncio.Queue()
        slots = asyncio.Semaphore(self.settings.stream_concurrency)
        done = object()
        open_streams: set[ResponseStream] = set()  # a decoupled model's requests under way on this stream

        async def answer(message: Any) -> None:
            try:
                if self.server.get_model(message.model_name, parse_version(message.model_version)).config.decoupled:
                    await self._stream(message, queue.put, open_streams)
                else:
                    result = await self._infer(message, call.principal)
                    await queue.put(messages.ModelStreamInferResponse(infer_response=result))
            except InferaError as exc:
                await queue.put(_stream_error(message, exc.message))
            except Exception as exc:  # noqa: BLE001 - one request's bug must not end the stream
                log.exception("unexpected error in a gRPC stream request")
                await queue.put(_stream_error(message, f"internal error: {type(exc).__name__}: {exc}"))
            finally:
                slots.release()

        async def read() -> None:
            running: set[asyncio.Task[None]] = set()
            try:
                async for message in requests:
                    await slots.acquire()
                    task = asyncio.ensure_future(answer(message))
                    running.add(task)
                    task.add_done_callback(running.discard)
                if running:
                    await asyncio.gather(*running, return_exceptions=True)
            finally:
                await queue.put(done)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await queue.get()) is not done:
                yield item
        finally:
            reader.cancel()
            for stream in list(open_streams):  # the client went away: its models stop generating
                stream.cancel()

    # ---- the model repository

    async def rpc_RepositoryIndex(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        rows = self.server.repository_index(ready_only=request.ready)
        return json_format.ParseDict({"models": rows}, response(), ignore_unknown_fields=True)

    async def rpc_RepositoryModelLoad(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        name = check_model_name(request.model_name)
        self._check_may_change(call.principal, name)
        parameters = parameters_of(request.parameters)
        config = parameters.get("config")
        if "config" in parameters and not isinstance(config, str):
            raise InvalidArgument(f"failed to load '{name}': parameter 'config' must be a JSON string")
        try:
            files = sent_files(parameters)
            normalised = normalise_files(files) if files else None
        except InvalidArgument as exc:
            raise InvalidArgument(f"failed to load '{name}': {exc.message}") from None
        control = self.repository_control
        if control is not None:
            from engine.server import config_override

            if await control.load(name, config=config_override(name, config), files=normalised, caller=call.principal):
                return response()
        await self.server.load_model(name, config=config, files=files or None, caller=call.principal)
        return response()

    async def rpc_RepositoryModelUnload(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        name = check_model_name(request.model_name)
        self._check_may_change(call.principal, name)
        control = self.repository_control
        if control is not None and await control.unload(name, caller=call.principal):
            return response()
        await self.server.unload_model(name, caller=call.principal)
        return response()

    def _check_may_change(self, principal: Principal, name: str) -> None:
        if not principal.may_change_models:
            raise may_not_change(principal, name)

    # ---- shared memory, trace, logging (engine/frontend/extensions.py answers HTTP the same way)

    async def rpc_SystemSharedMemoryStatus(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return _regions(response, extensions.shared_memory_status(self.server, "system", request.name or None))

    async def rpc_SystemSharedMemoryRegister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        details = {"key": request.key, "offset": request.offset, "byte_size": request.byte_size}
        extensions.register_shared_memory(self.server, "system", request.name, details)
        return response()

    async def rpc_SystemSharedMemoryUnregister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.unregister_shared_memory(self.server, "system", request.name or None)
        return response()

    async def rpc_CudaSharedMemoryStatus(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        return _regions(response, extensions.shared_memory_status(self.server, "cuda", request.name or None))

    async def rpc_CudaSharedMemoryRegister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.register_shared_memory(self.server, "cuda", request.name, {})
        return response()

    async def rpc_CudaSharedMemoryUnregister(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        extensions.unregister_shared_memory(self.server, "cuda", request.name or None)
        return response()

    async def rpc_TraceSetting(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        model = request.model_name or None
        # an empty value list clears a setting (a model's own setting, or back to the default)
        changes = {key: (list(value.value) or None) for key, value in request.settings.items()}
        if changes:
            self._check_may_change(call.principal, "tracing")
            settings = extensions.update_trace_settings(self.server, changes, model)
        else:
            settings = extensions.trace_settings(self.server, model)
        answer = response()
        for key, value in settings.items():
            answer.settings[key].value.extend(value if isinstance(value, list) else [value])
        return answer

    async def rpc_LogSettings(self, request: Any, call: Call, response: type) -> Any:  # noqa: N802
        changes = {key: parameter_value(value) for key, value in request.settings.items()}
        if changes:
            self._check_may_change(call.principal, "logging")
        settings = self.server.log_settings.update(changes) if changes else self.server.log_settings.to_dict()
        answer = response()
        for key, value in settings.items():
            slot = answer.settings[key]
            if isinstance(value, bool):
                slot.bool_param = value
            elif isinstance(value, int):
                slot.uint32_param = value
            else:
                slot.string_param = str(value)
        return answer

    # ---- grpc.health.v1

    def _health_handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            HEALTH_SERVICE,
            {
                "Check": grpc.unary_unary_rpc_method_handler(
                    self._health_check,
                    request_deserializer=health_pb2.HealthCheckRequest.FromString,
                    response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
                ),
                "Watch": grpc.unary_stream_rpc_method_handler(
                    self._health_watch,
                    request_deserializer=health_pb2.HealthCheckRequest.FromString,
                    response_serializer=health_pb2.HealthCheckResponse.SerializeToString,
                ),
            },
        )

    def _health_status(self, service: str) -> int | None:
        """SERVING or NOT_SERVING for the server ("") or a model by name; None for a name nobody knows."""
        serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        if service in ("", messages.SERVICE):
            return serving if self.server.is_ready() else not_serving
        if self.server.status(service).versions or service in {row["name"] for row in self.server.repository_index()}:
            return serving if self.server.model_ready(service) else not_serving
        return None

    async def _health_check(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        status = self._health_status(request.service)
        if status is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service or model '{request.service}'")
        return health_pb2.HealthCheckResponse(status=status)

    async def _health_watch(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        last = None
        while True:  # a watch lasts until the client goes; states are read once a second
            status = self._health_status(request.service)
            if status is None:
                status = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)
            await asyncio.sleep(1.0)


def _stream_error(message: Any, text: str) -> Any:
    failed = messages.ModelInferResponse(
        id=message.id, model_name=message.model_name, model_version=message.model_version
    )
    return messages.ModelStreamInferResponse(error_message=text, infer_response=failed)


def _regions(response_class: type, regions: list[dict[str, Any]]) -> Any:
    answer = response_class()
    for region in regions:
        json_format.ParseDict(region, answer.regions[region["name"]])
    return answer


def _enable_reflection(server: grpc.aio.Server) -> None:
    """Server reflection over Infera's own descriptor pool (which also holds health and reflection themselves)."""
    from grpc_reflection.v1alpha import reflection, reflection_pb2

    for module in (health_pb2, reflection_pb2):
        proto = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        try:
            messages.POOL.Add(proto)
        except TypeError:
            pass  # already added by an earlier front end in this process
    reflection.enable_server_reflection(
        (messages.SERVICE, HEALTH_SERVICE, *REFLECTION_SERVICES), server, pool=messages.POOL
    )
