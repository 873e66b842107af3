"""The lean ASGI application that serves Triton's v2 HTTP protocol on an InferenceServer."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from engine.errors import InferaError, PayloadTooLarge, Unauthorized, Unavailable
from engine.frontend.caller_limits import CallerLimits, caller_key
from engine.frontend.cross_site import check_repository_content_type, check_same_origin
from engine.frontend.generate import StreamReply
from engine.frontend.handlers import ASYNC_HANDLERS, SYNC_HANDLERS, Incoming, Reply, RepositoryControl, infer
from engine.frontend.header_rules import HTTP_REFUSAL, HeaderCheck
from engine.frontend.lifespan import ServiceLifespan
from engine.frontend.routes import DIRECT_ENDPOINTS, HEALTH_ENDPOINTS, REPOSITORY_CHANGES, Route, resolve
from engine.llm.budgets import BudgetExceeded, BudgetGate
from engine.protocol import error_body
from engine.serving.admission import ANONYMOUS, Principal, may_not_change

if TYPE_CHECKING:
    from engine.serving.server import InferenceServer

log = logging.getLogger("infera.frontend")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
# who sent a request: a Principal, or Unauthorized (401) raised for a missing or refused credential
Authenticate = Callable[[Scope], Awaitable[Principal]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Triton's default for --http-max-input-size
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
RETRY_AFTER_SECONDS = b"1"
OPEN_CODE_WARNING = (
    "INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE=true: anyone who reaches /v2 or gRPC without a token may load "
    "python models and other models that run code, and so run any code as this server's user; use it only for "
    "test suites on a closed network"
)


class V2App:
    """ASGI callable for `/v2/...`: health, metadata, config, stats, infer and the model repository.

    `authenticate(scope)` is awaited before every endpoint but the health checks and returns the caller as a
    Principal (or raises Unauthorized); without it every caller is `anonymous`, who may change models only when
    the server's settings open repository control. POSTs from another site (a browser page elsewhere) are refused
    before anything is read, and so are repository changes from callers who may not make them.
    """

    def __init__(
        self,
        server: InferenceServer,
        *,
        max_body_bytes: int | None = None,
        authenticate: Authenticate | None = None,
        repository_control: RepositoryControl | None = None,
        trusted_origins: tuple[str, ...] = (),
        budgets: BudgetGate | None = None,
    ) -> None:
        self.server = server
        self.budgets = budgets  # the callers' token budgets, held on generate as on /v1
        self.max_body_bytes = max_body_bytes if max_body_bytes is not None else server.settings.max_body_bytes
        self.authenticate = authenticate
        self.repository_control = repository_control
        self.trusted_origins = trusted_origins
        opened, code = server.settings.open_repository_control, server.settings.anonymous_may_load_code
        self.anonymous = Principal(ANONYMOUS.name, may_change_models=opened, may_load_code=code)
        if code:
            log.warning(OPEN_CODE_WARNING)
        self.caller_limits = CallerLimits(server.settings.max_concurrent_per_caller)
        self.headers = HeaderCheck(server.settings.http_headers, HTTP_REFUSAL)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind != "http":
            if kind == "lifespan":
                await ServiceLifespan().handle(receive, send)  # whoever composes this app owns start-up
            elif kind == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        if scope["method"] == "POST" and scope["path"].endswith("/infer"):
            reply = await _answer_while_connected(self.respond, scope, receive)
            if reply is None:
                return  # its client went away: no one to answer
        else:
            reply = await self.respond(scope, receive)
        if isinstance(reply, StreamReply):
            await send_stream(send, receive, reply)
        else:
            await send_reply(send, reply)

    def direct_route(self, path: str, method: str) -> Route | None:
        """The route of a request that an HTTP server may answer with `respond(scope, body=...)` once it has read
        the body itself (engine.frontend.routes.DIRECT_ENDPOINTS: never a stream), else None."""
        if not path.startswith("/v2/"):
            return None  # the console's pages and API: not remembered among the routes
        route = resolve(path)
        if route is None or route.endpoint not in DIRECT_ENDPOINTS or method != route.method:
            return None
        return route

    async def respond(
        self, scope: Scope, receive: Receive | None = None, body: bytes | None = None, route: Route | None = None
    ) -> Reply | StreamReply:
        """The answer to an HTTP request: its body read with `receive`, or given whole as `body` by a server that
        read it itself (after `direct_route`, which also gives `route`). Every refusal is an answer too."""
        if route is None:
            route = resolve(scope["path"])
            if route is None:
                return Reply(404, error_body("Not Found"))
        method = scope["method"]
        if self.headers.required and (refused := self.headers.refusal(route.endpoint, scope["headers"])):
            return Reply(403, error_body(refused))  # Triton's restricted API: before the method, the credential
        if method != route.method and not route.allows(method):
            allowed = route.method.replace(",", " or ")
            reply = Reply(405, error_body(f"method {method} is not allowed; use {allowed}"))
            reply.headers.append((b"allow", route.method.replace(",", ", ").encode()))
            return reply
        try:
            incoming = Incoming(
                route=route,
                body=b"",
                max_body_bytes=self.max_body_bytes,
                repository_control=self.repository_control,
                scope=scope,
                principal=self.anonymous,
                method=method,
                budgets=self.budgets,
            )
            declared, from_browser = _read_headers(scope, incoming)
            if route.endpoint == "infer" and self.headers.pattern is not None:
                incoming.forwarded = self.headers.forwarded(scope["headers"])
            if method == "POST" and from_browser:  # Triton's clients send neither Origin nor Sec-Fetch-Site
                check_same_origin(scope, self.trusted_origins)
            if self.authenticate is not None and route.endpoint not in HEALTH_ENDPOINTS:
                incoming.principal = await self.authenticate(scope)
            if route.endpoint in REPOSITORY_CHANGES:
                check_repository_content_type(scope)
                if not incoming.principal.may_change_models:
                    raise may_not_change(incoming.principal, route.model or "")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                raise _too_large(self.max_body_bytes)  # refused before a byte of the body is read
            caller = None
            if route.endpoint not in HEALTH_ENDPOINTS:  # a caller's requests in flight, its body's reading included
                client = scope.get("client")
                caller = caller_key(incoming.principal, client[0] if client else None)
                self.caller_limits.enter(caller)
            try:
                if body is not None:
                    if len(body) > self.max_body_bytes:
                        raise _too_large(self.max_body_bytes)
                    incoming.body = body
                elif method == "POST":
                    incoming.body = await read_body(receive, self.max_body_bytes)
                endpoint = route.endpoint
                if endpoint == "infer":
                    reply = await infer(self.server, incoming)
                else:
                    handler = SYNC_HANDLERS.get(endpoint)
                    if handler is not None:
                        reply = handler(self.server, incoming)
                    else:
                        reply = await ASYNC_HANDLERS[endpoint](self.server, incoming)
            finally:
                if caller is not None:
                    self.caller_limits.leave(caller)
        except InferaError as exc:
            reply = Reply(exc.status, error_body(exc))
            if isinstance(exc, BudgetExceeded):
                reply.headers.append((b"retry-after", str(exc.retry_after).encode()))
            elif isinstance(exc, Unavailable) or exc.status == 429:
                reply.headers.append((b"retry-after", RETRY_AFTER_SECONDS))
            elif isinstance(exc, Unauthorized):
                reply.headers.append((b"www-authenticate", b'Bearer realm="infera"'))
        except Exception as exc:  # a bug must still answer, and must not take the server down
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            reply = Reply(500, error_body(f"internal error: {type(exc).__name__}: {exc}"))
        return reply


def _read_headers(scope: Scope, incoming: Incoming) -> tuple[bytes | None, bool]:
    """Pick the headers the protocol uses in one pass; return the declared Content-Length and whether a browser
    sent the request (an Origin or Sec-Fetch-Site header, which the cross-site check reads)."""
    declared = None
    from_browser = False
    for name, value in scope["headers"]:
        if name == b"content-length":
            declared = value
        elif name == b"inference-header-content-length":
            incoming.header_length = value
        elif name == b"content-encoding":
            incoming.content_encoding = value.decode("latin-1")
        elif name == b"accept-encoding":
            incoming.accept_encoding = value.decode("latin-1")
        elif name in _BROWSER_HEADERS:
            from_browser = True
    return declared, from_browser


# ASGI servers lowercase header names; the cross-site check also lowercases them, so either spelling counts here
_BROWSER_HEADERS = frozenset({b"origin", b"sec-fetch-site", b"Origin", b"Sec-Fetch-Site"})


async def read_body(receive: Receive, max_body_bytes: int) -> bytes:
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


async def send_reply(send: Send, reply: Reply) -> None:
    headers = [(b"content-type", reply.content_type), (b"content-length", b"%d" % len(reply.body))]
    if reply.headers:
        headers += reply.headers
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


async def send_stream(send: Send, receive: Receive, reply: StreamReply) -> None:
    """Send chunks as they come; a client that disconnects cancels the stream (the model sees it) and ends it.

    No task per chunk: the watcher of the client's disconnect cancels the sending task instead, which costs
    nothing while the client stays (a generator's 32 streams send a chunk each per step)."""
    headers = [(b"content-type", reply.content_type), (b"cache-control", b"no-cache"), *reply.headers]
    sender = asyncio.current_task()
    gone = asyncio.ensure_future(_disconnected(receive))
    left = False

    def client_left(watcher: asyncio.Future) -> None:
        nonlocal left
        if not watcher.cancelled() and watcher.exception() is None and sender is not None:
            left = True
            reply.cancel()
            sender.cancel()  # wherever it waits: for the next chunk, or for the transport

    gone.add_done_callback(client_left)
    try:
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        if reply.first:
            await send({"type": "http.response.body", "body": reply.first, "more_body": True})
        async for chunk in reply.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside (the server stopping), not by the client leaving
        sender.uncancel()
    except OSError:  # the client went away mid-send
        reply.cancel()
    finally:
        gone.remove_done_callback(client_left)
        gone.cancel()


async def _answer_while_connected(
    respond: Callable[[Scope, Receive], Awaitable[Reply | StreamReply]], scope: Scope, receive: Receive
) -> Reply | StreamReply | None:
    """An inference's answer, or None when its client disconnected first: once the body is read, a client that
    goes away cancels the request, as a direct answer's does (engine.frontend.direct_http), so a sequence START
    still queued leaves its backlog (engine.schedulers.sequence_dispatcher)."""
    task = asyncio.current_task()
    watcher: asyncio.Future | None = None
    answering, left = True, False

    def client_left(done: asyncio.Future) -> None:
        nonlocal left
        if answering and not done.cancelled() and done.exception() is None and task is not None:
            left = True
            task.cancel()

    async def receive_then_watch() -> dict[str, Any]:
        nonlocal watcher
        message = await receive()
        if watcher is None and message["type"] == "http.request" and not message.get("more_body", False):
            watcher = asyncio.ensure_future(_disconnected(receive))
            watcher.add_done_callback(client_left)
        return message

    try:
        return await respond(scope, receive_then_watch)
    except asyncio.CancelledError:
        if not left or task is None:
            raise  # cancelled from outside (the server stopping), not by the client leaving
        task.uncancel()
        return None
    finally:
        answering = False
        if watcher is not None:
            watcher.cancel()


async def _disconnected(receive: Receive) -> None:
    """Until the client disconnects (the request body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass


__all__ = ["DEFAULT_MAX_BODY_BYTES", "V2App"]
