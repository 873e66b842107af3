"""The one ASGI application Infera serves: /v2 and /metrics to the engine, WebSockets to Channels, the rest to Django.

It also owns the engine's life: started by ASGI lifespan (uvicorn), or on the first connection for servers that
send no lifespan events (daphne), and stopped at shutdown. Models load in the background, so the console answers
at once and /v2/health/ready says 200 only when they are in.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from console import engine_link

if TYPE_CHECKING:
    from engine.server import InferenceServer

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("console.composition")

ENGINE_PATHS = ("/v2", "/metrics")


def is_engine_path(path: str) -> bool:
    """True for the paths the engine answers itself: /v2, /v2/..., /metrics."""
    return any(path == prefix or path.startswith(prefix + "/") for prefix in ENGINE_PATHS)


def build_engine(
    model_store: Path,
    *,
    authenticate: Callable[[Scope], Awaitable[bool]] | None = None,
    repository_control: Any = None,
) -> tuple[InferenceServer, ASGIApp]:
    """The InferenceServer over `model_store` and the v2 ASGI app serving it, with the console's hooks."""
    from engine.frontend import V2App
    from engine.server import InferenceServer

    Path(model_store).mkdir(parents=True, exist_ok=True)  # a new install starts with an empty store, not none
    server = InferenceServer(model_store)
    return server, V2App(server, authenticate=authenticate, repository_control=repository_control)


class InferaApplication:
    """Routes each connection by type and path, and starts and stops the engine with the process."""

    def __init__(
        self,
        *,
        django_app: ASGIApp,
        websocket_app: ASGIApp,
        engine_app: ASGIApp,
        server: InferenceServer | None,
    ) -> None:
        self.django_app = django_app
        self.websocket_app = websocket_app
        self.engine_app = engine_app
        self.server = server
        self._start_task: asyncio.Task[None] | None = None
        engine_link.set_server(server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if self._start_task is None:
            self.begin_startup()  # a server that sends no lifespan events (daphne) starts us here
        if kind == "http" and is_engine_path(scope["path"]):
            await self.engine_app(scope, receive, send)
        elif kind == "websocket":
            await self.websocket_app(scope, receive, send)
        else:
            await self.django_app(scope, receive, send)

    def begin_startup(self) -> asyncio.Task[None]:
        """Start the engine in the background (once); the returned task ends when every model is loaded."""
        if self._start_task is None:
            self._start_task = asyncio.get_running_loop().create_task(self._start_engine())
            self._start_task.add_done_callback(_log_start_failure)
        return self._start_task

    async def _start_engine(self) -> None:
        if self.server is None:
            logger.warning("no inference engine in this build: /v2 answers 501")
            return
        engine_link.set_startup_failure(None)
        logger.info("engine starting: loading every model in the model store")
        await self.server.start(load_models=True)
        for hook in engine_link.started_hooks():
            await hook(self.server)
        logger.info("engine ready")

    async def shutdown(self) -> None:
        """Stop loading if still at it, then stop the engine (draining what it runs)."""
        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()
            await asyncio.gather(self._start_task, return_exceptions=True)
        if self.server is not None and self._start_task is not None:
            for hook in engine_link.stopping_hooks():
                try:
                    await hook(self.server)
                except Exception:  # one failing hook must not keep the engine from stopping
                    logger.exception("a hook run before the engine stops failed")
            await self.server.stop()
        self._start_task = None

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.begin_startup()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                try:
                    await self.shutdown()
                except Exception as exc:  # the process exits either way; say why it was not clean
                    logger.exception("engine shutdown failed")
                    await send({"type": "lifespan.shutdown.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.shutdown.complete"})
                return


def _log_start_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        error = task.exception()
        logger.error("engine start-up failed", exc_info=error)
        engine_link.set_startup_failure(f"{type(error).__name__}: {error}")
