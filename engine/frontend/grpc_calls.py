"""The plumbing of a gRPC call: its authentication on metadata before its message is read, and its message.

`CallGate` (a server interceptor) asks a `Binder` for the handler of each call of the front end's own services,
given the call's metadata only: a refused call gets a handler that aborts without receiving anything (a
request-streaming one, which reads nothing until asked); an accepted one gets its handler with the principal bound
in a `Call`. Handlers parse their messages themselves, so that a corrupt one answers INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from engine.errors import InferaError, InvalidArgument
from engine.serving.admission import Principal

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


def status_code(error: InferaError) -> grpc.StatusCode:
    return STATUS_CODES.get(error.status, grpc.StatusCode.UNKNOWN)


@dataclass
class Call:
    """What a handler knows of one call: who made it, from where, and how to check its credential again."""

    principal: Principal
    peer: str = ""  # the client's address without its port
    recheck: Callable[[], Awaitable[Principal]] | None = None  # None: nothing to revoke (no token)
    forwarded: dict[str, str] | None = None  # metadata forwarded as request parameters (header_rules.py)


# a method's full path -> how to bind its handler to the principal found on the call's metadata
Binder = Callable[[Sequence[tuple[str, Any]]], Awaitable[grpc.RpcMethodHandler]]


class CallGate(grpc.aio.ServerInterceptor):
    """Authenticates every call of the front end's own services on its metadata, before its message is read.

    A refused call gets a handler that aborts without receiving anything (a request-streaming one, which reads
    nothing until asked); an accepted call gets its handler with the principal bound to it. Other services
    (reflection) pass through.
    """

    def __init__(self, binders: dict[str, Binder]) -> None:
        self.binders = binders

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]], details: Any
    ) -> grpc.RpcMethodHandler:
        bind = self.binders.get(details.method)
        if bind is None:
            return await continuation(details)
        return await bind(details.invocation_metadata or ())


def refusal(code: grpc.StatusCode, text: str) -> grpc.RpcMethodHandler:
    """A handler that ends the call with `code` without reading its message."""

    async def refuse(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        await context.abort(code, text)

    return grpc.stream_unary_rpc_method_handler(refuse)


def parsed(request_class: type, raw: bytes) -> Any:
    """The message `raw` holds; InvalidArgument (INVALID_ARGUMENT) for bytes that are not one."""
    try:
        return request_class.FromString(raw)
    except DecodeError as exc:
        raise InvalidArgument(f"the request is not a valid {request_class.DESCRIPTOR.name} message: {exc}") from None


async def parsed_stream(request_class: type, raws: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    async for raw in raws:
        yield parsed(request_class, raw)


def peer_host(peer: str | None) -> str:
    """`ipv4:127.0.0.1:5000` -> `ipv4:127.0.0.1`: a client is counted by its address, not by its port."""
    return (peer or "").rpartition(":")[0] or (peer or "")
