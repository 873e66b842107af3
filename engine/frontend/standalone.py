"""The v2 front end with its own engine, for running the engine alone: `uvicorn engine.frontend.standalone:app`.

`INFERA_MODEL_REPOSITORY` names the model repository; `INFERA_MAX_BODY_BYTES` optionally caps request bodies.
The engine starts on the lifespan start-up event, or on the first request under servers without lifespan
(daphne), and stops on lifespan shutdown.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from engine.errors import InvalidArgument
from engine.frontend.http import DEFAULT_MAX_BODY_BYTES, Receive, Scope, Send, V2App
from engine.server import InferenceServer


class StandaloneApp:
    """An InferenceServer and the V2App that serves it, started and stopped by this ASGI app."""

    def __init__(self, server: InferenceServer, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.server = server
        self.v2 = V2App(server, max_body_bytes=max_body_bytes)
        self._started = False
        self._starting: asyncio.Future[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if not self._started:
            await self.start()
        await self.v2(scope, receive, send)

    async def start(self) -> None:
        """Start the engine once, loading every model of the repository.

        The start runs as a task of its own, so a first request whose client goes away cannot cancel it.
        """
        if self._starting is None:
            self._starting = asyncio.ensure_future(self.server.start())
        await asyncio.shield(self._starting)
        self._started = True

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.server.stop()
                self._started = False
                self._starting = None
                await send({"type": "lifespan.shutdown.complete"})
                return


def create_standalone_app(
    repository_path: Path | str, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, gpu_count: int | None = None
) -> StandaloneApp:
    """An ASGI app serving the models of `repository_path` over the v2 protocol."""
    return StandaloneApp(InferenceServer(repository_path, gpu_count=gpu_count), max_body_bytes=max_body_bytes)


def app_from_environment() -> StandaloneApp:
    """The app `INFERA_MODEL_REPOSITORY` and `INFERA_MAX_BODY_BYTES` describe."""
    repository = os.environ.get("INFERA_MODEL_REPOSITORY")
    if not repository:
        raise InvalidArgument("set INFERA_MODEL_REPOSITORY to the model repository to serve")
    limit = os.environ.get("INFERA_MAX_BODY_BYTES", "")
    if limit and not limit.isdigit():
        raise InvalidArgument(f"INFERA_MAX_BODY_BYTES must be a number of bytes, got '{limit}'")
    return create_standalone_app(repository, max_body_bytes=int(limit) if limit else DEFAULT_MAX_BODY_BYTES)


_app: StandaloneApp | None = None


def __getattr__(name: str) -> Any:
    """Build `app` on first access, so importing this module needs no environment."""
    global _app
    if name == "app":
        if _app is None:
            _app = app_from_environment()
        return _app
    raise AttributeError(name)
