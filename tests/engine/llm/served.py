"""A real HTTP server in the test's own process (uvicorn on loopback, on the test's event loop) over an engine, its
/v2 and /v1 front ends, so a test can reach into the engine (patch a model's forward) while clients call it."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from engine.frontend.http import V2App
from engine.frontend.openai import OpenAIApp
from engine.llm.budgets import BudgetGate
from engine.serving.admission import Principal
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings

WAIT_S = 120.0  # a bound on every wait: a hang fails the test, it never decides it


@dataclass
class Served:
    server: InferenceServer
    client: httpx.AsyncClient

    async def generate(self, model: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return await self.client.post(f"/v2/models/{model}/generate", json=body, headers=headers)

    async def stream_events(self, model: str, body: dict[str, Any], first: asyncio.Event | None = None) -> list[dict]:
        """Every event of a generate_stream call, in order (`first` is set when the first one arrives)."""
        events: list[dict] = []
        async with self.client.stream("POST", f"/v2/models/{model}/generate_stream", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    events.append(json.loads(line[len("data:") :]))
                    if first is not None:
                        first.set()
        return events


def tiny_repository(repo: Path, tiny_llama_folder: Path, config: str) -> Path:
    """`repo` holding `tiny`, the llm backend over the tiny Llama with `config`."""
    (repo / "tiny").mkdir()
    (repo / "tiny" / "config.pbtxt").write_text(config)
    shutil.copytree(tiny_llama_folder, repo / "tiny" / "1")
    return repo


@asynccontextmanager
async def serving(
    repo: Path,
    settings: EngineSettings | None = None,
    authenticate: Callable[[Any], Awaitable[Principal]] | None = None,
    budgets: BudgetGate | None = None,
) -> AsyncIterator[Served]:
    """The engine over `repo` started, served on a free loopback port; a client of it; all stopped afterwards."""
    server = InferenceServer(repo, gpu_count=0, settings=settings or EngineSettings())
    await server.start(load_models=True)
    v2 = V2App(server, authenticate=authenticate, budgets=budgets)
    app = OpenAIApp(server, v2, authenticate=authenticate, budgets=budgets)
    listener = socket.create_server(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", loop="asyncio", interface="asgi3")
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve(sockets=[listener]))
    try:
        async with asyncio.timeout(WAIT_S):
            while not web.started:
                await asyncio.sleep(0)  # a yield to the loop: uvicorn starts on this same loop
        base = f"http://127.0.0.1:{listener.getsockname()[1]}"
        async with httpx.AsyncClient(base_url=base, timeout=WAIT_S) as client:
            yield Served(server, client)
    finally:
        web.should_exit = True
        await task
        await server.stop()
