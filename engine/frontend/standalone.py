"""The v2 front end with its own engine, for running the engine alone: `uvicorn engine.frontend.standalone:app`
(add `--http engine.frontend.standalone:DirectProtocol` to answer /v2 inference past uvicorn's ASGI cycle,
engine/frontend/direct_http.py).

`INFERA_MODEL_REPOSITORY` names the model repository; the rest of the engine's settings come from the environment
too (engine.settings: INFERA_MAX_BODY_BYTES, INFERA_ALLOW_PYTHON_MODELS, INFERA_OPEN_REPOSITORY_CONTROL,
INFERA_GRPC_PORT for its gRPC front end on 127.0.0.1, ...).
The engine starts on the lifespan start-up event, or on the first request under servers without lifespan
(daphne), and stops on lifespan shutdown.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engine.environment.values import SettingError
from engine.errors import InvalidArgument
from engine.frontend.direct_http import DirectRequestsProtocol
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.frontend.handlers import Reply
from engine.frontend.http import Receive, Scope, Send, V2App
from engine.frontend.lifespan import ServiceLifespan
from engine.frontend.openai import OpenAIApp
from engine.frontend.routes import Route
from engine.monitoring.prometheus import MetricsApp
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, read_engine_settings


class StandaloneApp:
    """An InferenceServer and the V2App that serves it, started and stopped by this ASGI app."""

    def __init__(
        self,
        server: InferenceServer,
        *,
        max_body_bytes: int | None = None,
        grpc_host: str | None = None,
        serving_process: bool = False,
    ) -> None:
        self.server = server
        self.v2 = V2App(server, max_body_bytes=max_body_bytes)
        # /metrics as Triton serves it, /v1 the OpenAI-compatible endpoints, the rest is /v2
        self.http = MetricsApp(server, fallback=OpenAIApp(server, self.v2))
        grpc = server.settings.grpc
        # gRPC only where asked for (the app the environment describes), never by default in a test or a script
        self.grpc = GrpcFrontEnd(server, grpc, host=grpc_host) if grpc_host and grpc.port else None
        self.lifespan = ServiceLifespan(self._start, self._stop, wait_for_start=True, serving_process=serving_process)

    async def _start(self) -> None:
        if self.grpc is not None:
            await self.grpc.start()
        await self.server.start()

    async def _stop(self) -> None:
        grace = self.server.settings.shutdown_grace_seconds
        if self.grpc is not None:
            await self.grpc.stop(grace)
        await self.server.stop(grace_seconds=grace)  # a model still busy after the grace is stopped

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan.handle(receive, send)
            return
        await self.lifespan.on_connection()
        await self.http(scope, receive, send)

    async def start(self) -> None:
        """Start the engine once, loading every model of the repository."""
        await self.lifespan.on_connection()

    def direct_route(self, path: str, method: str) -> Route | None:
        """The route when uvicorn's protocol may answer the request itself (DirectProtocol): a /v2 inference or
        probe, once the engine's start has begun."""
        return self.v2.direct_route(path, method) if self.lifespan.begun else None

    async def respond_direct(self, scope: Scope, body: bytes, route: Route) -> Reply:
        return await self.v2.respond(scope, body=body, route=route)  # never a stream on a direct route


def create_standalone_app(
    repository_path: Path | str,
    *,
    max_body_bytes: int | None = None,
    gpu_count: int | None = None,
    settings: EngineSettings | None = None,
) -> StandaloneApp:
    """An ASGI app serving the models of `repository_path` over the v2 protocol."""
    server = InferenceServer(repository_path, gpu_count=gpu_count, settings=settings)
    return StandaloneApp(server, max_body_bytes=max_body_bytes)


def app_from_environment() -> StandaloneApp:
    """The app `INFERA_MODEL_REPOSITORY` and the engine's settings describe."""
    repository = os.environ.get("INFERA_MODEL_REPOSITORY")
    if not repository:
        raise InvalidArgument("set INFERA_MODEL_REPOSITORY to the model repository to serve")
    try:
        settings = read_engine_settings()
    except SettingError as exc:
        raise InvalidArgument(str(exc)) from None
    # the process an ASGI server runs this app in serves it alone: it tunes the interpreter once started
    # (engine.frontend.lifespan.tune_serving_process)
    return StandaloneApp(InferenceServer(repository, settings=settings), grpc_host="127.0.0.1", serving_process=True)


_app: StandaloneApp | None = None


class DirectProtocol(DirectRequestsProtocol):
    """uvicorn's protocol for `app`, answering its /v2 inference and probes past ASGI (`--http` names it)."""

    @property
    def responder(self) -> StandaloneApp | None:
        return _app  # built by uvicorn's loading of `app` before any connection


def __getattr__(name: str) -> Any:
    """Build `app` on first access, so importing this module needs no environment."""
    global _app
    if name == "app":
        if _app is None:
            _app = app_from_environment()
        return _app
    raise AttributeError(name)
