"""Helpers for registry tests that run a real in-process engine: register models, infer, wait for a state."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

import numpy as np
from asgiref.sync import sync_to_async

from console.registry.models import ModelVersion
from console.registry.reconciler import Reconciler
from console.registry.services import lookups, model_actions, new_versions
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest, InferenceResponse
from tests.console.registry.conftest import model_file

# one reconciler per engine, as a serving process has (the runtime owns it there)
_reconcilers: weakref.WeakKeyDictionary[InferenceServer, Reconciler] = weakref.WeakKeyDictionary()


def reconciler_for(server: InferenceServer, period: float = 3600.0) -> Reconciler:
    if server not in _reconcilers:
        _reconcilers[server] = Reconciler(server, period)
    return _reconcilers[server]


async def reconcile_once(server: InferenceServer) -> None:
    """One full pass of the engine's reconciler."""
    await reconciler_for(server).reconcile_once()


async def stop_reconciler(server: InferenceServer) -> None:
    reconciler = _reconcilers.pop(server, None)
    if reconciler is not None:
        await reconciler.stop()


@sync_to_async
def register(actor, name: str, files: list[bytes], config: str | None = None) -> None:
    """Register `name` and upload one version per file (the first becomes active)."""
    from console.registry.uploads import parse_config_text

    model = model_actions.register_model(actor, name)
    for content in files:
        parsed = parse_config_text(config) if config else None
        new_versions.add_version(actor, model, model_file(content), config=parsed)


@sync_to_async
def add(actor, name: str, content: bytes, activate: bool = False) -> int:
    """Upload one more version of a registered model; its number."""
    return new_versions.add_version(actor, lookups.get_model(name), model_file(content), activate=activate).number


@sync_to_async
def change(action: Callable, actor, name: str, number: int) -> None:
    """Apply a services action (activate, load_version, unload_version, delete_version) to one version."""
    action(actor, lookups.get_version(name, number))


@sync_to_async
def states(name: str) -> dict[int, tuple[str, str]]:
    """{number: (state, error)} of a model's versions in the database."""
    rows = ModelVersion.objects.filter(model__name=name).values_list("number", "state", "error")
    return {number: (state, error) for number, state, error in rows}


def simple_request(name: str = "simple", version: int | None = None) -> InferenceRequest:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    return InferenceRequest(model_name=name, inputs={"INPUT0": a, "INPUT1": a}, model_version=version, batch_size=1)


async def infer(server: InferenceServer, name: str = "simple", version: int | None = None) -> InferenceResponse:
    return await server.infer(simple_request(name, version))


def served_version(server: InferenceServer, name: str = "simple") -> int:
    return server.get_model(name).version


async def eventually(check: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait for something another task does (the reconciler loop); the timeout only bounds a failure."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError("the expected state was not reached in time")
        await asyncio.sleep(0.02)
