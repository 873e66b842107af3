"""The lean ASGI application that serves Triton's v2 HTTP protocol on an InferenceServer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.errors import InferaError, PayloadTooLarge, Unavailable
from engine.frontend.handlers import ASYNC_HANDLERS, SYNC_HANDLERS, Incoming, Reply, RepositoryControl
from engine.frontend.routes import HEALTH_ENDPOINTS, resolve
from engine.protocol import error_body

if TYPE_CHECKING:
    from engine.server import InferenceServer

log = logging.getLogger("infera.frontend")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Authenticate = Callable[[Scope], Awaitable[bool]]

# Triton's default for --http-max-input-size
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
RETRY_AFTER_SECONDS = b"1"


class Unauthorized(InferaError):
    """The request carries no acceptable credentials (HTTP 401)."""

    status = 401


class V2App:
    """ASGI callable for `/v2/...`: health, metadata, config, stats, infer and the model repository.

    `authenticate(scope)` is awaited before every endpoint but the health checks; it returns False (answered
    401) or raises an InferaError whose status is answered.
    """

    def __init__(
        self,
        server: InferenceServer,
        *,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        authenticate: Authenticate | None = None,
        repository_control: RepositoryControl | None = None,
    ) -> None:
        self.server = server
        self.max_body_bytes = max_body_bytes
        self.authenticate = authenticate
        self.repository_control = repository_control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await acknowledge_lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = resolve(scope["path"])
        if route is None:
            await _send(send, Reply(404, error_body("Not Found")))
            return
        if scope["method"] != route.method:
            reply = Reply(405, error_body(f"method {scope['method']} is not allowed; use {route.method}"))
            reply.headers.append((b"allow", route.method.encode()))
            await _send(send, reply)
            return
        try:
            if self.authenticate is not None and route.endpoint not in HEALTH_ENDPOINTS:
                if not await self.authenticate(scope):
                    raise Unauthorized("authentication required: send 'Authorization: Bearer <token>'")
            incoming = Incoming(
                route=route,
                body=b"",
                max_body_bytes=self.max_body_bytes,
                repository_control=self.repository_control,
                scope=scope,
            )
            _read_headers(scope, incoming, self.max_body_bytes)
            if route.method == "POST":
                incoming.body = await _read_body(receive, self.max_body_bytes)
            handler = SYNC_HANDLERS.get(route.endpoint)
            if handler is not None:
                reply = handler(self.server, incoming)
            else:
                reply = await ASYNC_HANDLERS[route.endpoint](self.server, incoming)
        except InferaError as exc:
            reply = Reply(exc.status, error_body(exc))
            if isinstance(exc, Unavailable):
                reply.headers.append((b"retry-after", RETRY_AFTER_SECONDS))
            elif isinstance(exc, Unauthorized):
                reply.headers.append((b"www-authenticate", b'Bearer realm="infera"'))
        except Exception as exc:  # a bug must still answer, and must not take the server down
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            reply = Reply(500, error_body(f"internal error: {type(exc).__name__}: {exc}"))
        await _send(send, reply)


def _read_headers(scope: Scope, incoming: Incoming, max_body_bytes: int) -> None:
    """Pick the headers the protocol uses; refuse a declared body over the limit before reading it."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            if value.isdigit() and int(value) > max_body_bytes:
                raise _too_large(max_body_bytes)
        elif name == b"content-encoding":
            incoming.content_encoding = value.decode("latin-1")
        elif name == b"accept-encoding":
            incoming.accept_encoding = value.decode("latin-1")
        elif name == b"inference-header-content-length":
            incoming.header_length = value


async def _read_body(receive: Receive, max_body_bytes: int) -> bytes:
    """The whole request body, refusing more than `max_body_bytes`."""
    message = await receive()
    body = message.get("body", b"")
    if not message.get("more_body", False):
        if len(body) > max_body_bytes:
            raise _too_large(max_body_bytes)
        return body
    chunks = [body]
    size = len(body)
    while message.get("more_body", False):
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body_bytes:
            raise _too_large(max_body_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"request body exceeds the limit of {limit} bytes")


async def _send(send: Send, reply: Reply) -> None:
    headers = [
        (b"content-type", reply.content_type),
        (b"content-length", str(len(reply.body)).encode()),
        *reply.headers,
    ]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


async def acknowledge_lifespan(receive: Receive, send: Send) -> None:
    """Answer lifespan events without work (the caller that composes this app owns start-up)."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


__all__ = ["DEFAULT_MAX_BODY_BYTES", "Unauthorized", "V2App"]
