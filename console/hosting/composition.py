"""The one ASGI application Infera serves: /v2, /v1 (with /tokenize, /detokenize) and /metrics to the engine,
WebSockets to Channels, the rest to Django.

It owns the process's Runtime (runtime.py): started by ASGI lifespan (uvicorn) or on the first connection
for servers that send no lifespan events (daphne), stopped at shutdown, and placed in every connection's scope.
Every request and WebSocket is counted in the runtime's Connections, which a graceful shutdown drains.
Behind a trusted load balancer the scope carries the client's own address and scheme (console/forwarded.py).
Django is reached through the BodyGate, which refuses oversized and unauthenticated bodies before they are read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from console.config import InferaSettings
from console.forwarded import ForwardedHeaders, trusted_networks
from console.hosting.body_gate import BodyGate
from console.hosting.runtime import Runtime
from console.peers.identity import ProcessIdentity
from console.runtime_of import RUNTIME_KEY
from engine.api import TOKEN_PATHS, Reply, Route

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ENGINE_PATHS = ("/v2", "/v1", "/metrics", *TOKEN_PATHS)
_ENGINE_SUBPATHS = tuple(prefix + "/" for prefix in ENGINE_PATHS)


def is_engine_path(path: str) -> bool:
    """True for the paths the engine answers itself: /v2, /v1 (OpenAI-compatible), their subpaths, /metrics,
    /tokenize and /detokenize."""
    return path.startswith(_ENGINE_SUBPATHS) or path in ENGINE_PATHS


def is_v2_path(path: str) -> bool:
    """True for /v2 and its subpaths, which the v2 app answers (the engine app's /metrics and /v1 lie beside it)."""
    return path.startswith("/v2/") or path == "/v2"


class InferaApplication:
    """Routes each connection by type and path, and starts and stops the runtime with the process."""

    def __init__(
        self,
        *,
        django_app: ASGIApp,
        websocket_app: ASGIApp,
        runtime: Runtime,
        forwarded: ForwardedHeaders | None = None,
    ) -> None:
        self.django_app = django_app
        self.websocket_app = websocket_app
        self.runtime = runtime
        self.forwarded = forwarded or ForwardedHeaders(())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self.runtime.lifespan.handle(receive, send)
            return
        await self.runtime.lifespan.on_connection()  # a server that sends no lifespan events (daphne) starts us here
        scope[RUNTIME_KEY] = self.runtime
        self.forwarded.apply(scope)  # the client's own address behind a trusted load balancer
        connections = self.runtime.connections  # what a graceful shutdown waits for (shutdown.py)
        if kind == "websocket":
            await connections.websocket(self.websocket_app, scope, receive, send)
            return
        connections.request_started()
        try:
            path = scope["path"] if kind == "http" else ""
            if is_v2_path(path):  # inference, the hot path: straight to the v2 app, past /metrics and /v1
                await self.runtime.v2(scope, receive, send)
            elif is_engine_path(path):
                await self.runtime.engine_app(scope, receive, send)
            else:
                await self.django_app(scope, receive, send)
        finally:
            connections.request_ended()

    # ---- requests that the HTTP protocol answers itself (engine/frontend/direct_http.py)

    def direct_route(self, path: str, method: str) -> Route | None:
        """The route when a request may be answered past ASGI (`respond_direct`): a /v2 inference or probe, once
        the runtime has begun; None sends it the ASGI way."""
        return self.runtime.v2.direct_route(path, method) if self.runtime.lifespan.begun else None

    async def respond_direct(self, scope: Scope, body: bytes, route: Route) -> Reply:
        """The answer to a request whose whole body the protocol has read: the v2 app's, counted in the
        runtime's Connections and with the client's address behind a trusted load balancer, as `__call__` does."""
        scope[RUNTIME_KEY] = self.runtime
        self.forwarded.apply(scope)
        connections = self.runtime.connections
        connections.request_started()
        try:
            return await self.runtime.v2.respond(scope, body=body, route=route)  # never a stream on a direct route
        finally:
            connections.request_ended()


def build_application(
    settings: InferaSettings, *, listen_host: str | None = None, identity: ProcessIdentity | None = None
) -> InferaApplication:
    """The application for these settings; `listen_host` is where `serve` listens (None: decide per connection);
    `identity` names a worker of `serve --workers` (None: the replica is this one process)."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import URLRouter
    from django.core.asgi import get_asgi_application

    django_app = get_asgi_application()  # sets Django up before anything below imports models

    from console.hosting.routing import websocket_urlpatterns
    from console.hosting.websocket_origin import SameOriginValidator

    return InferaApplication(
        django_app=BodyGate(django_app, settings),
        websocket_app=SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        runtime=Runtime(settings, listen_host=listen_host, identity=identity),
        forwarded=ForwardedHeaders(trusted_networks(settings.trusted_proxies)),
    )
