"""Switching the active version while 32 clients send requests loses none of them."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from console.registry.services import version_actions
from engine.serving.server import InferenceServer
from tests.console.registry.engine_helpers import (
    change,
    infer,
    reconcile_once,
    register,
    served_version,
)

pytestmark = pytest.mark.django_db(transaction=True)

CLIENTS = 32


async def test_a_switch_under_32_concurrent_clients_fails_no_request(operator, simple_onnx, store):
    await register(operator, "simple", [simple_onnx, simple_onnx])
    await change(version_actions.unload_version, operator, "simple", 2)  # version 2 loads only when activated
    server = InferenceServer(store)
    await server.start(load_models=False)
    await reconcile_once(server)
    assert served_version(server) == 1

    seen: Counter[int] = Counter()
    failures: list[BaseException] = []
    stop = asyncio.Event()
    all_running = asyncio.Event()
    saw_new = asyncio.Event()
    started = 0

    async def client() -> None:
        nonlocal started
        first = True
        while not stop.is_set():
            try:
                response = await infer(server)
            except Exception as exc:  # every failure is counted, none may happen
                failures.append(exc)
                continue
            seen[response.model_version] += 1
            if response.model_version == 2:
                saw_new.set()
            if first:
                first = False
                started += 1
                if started == CLIENTS:
                    all_running.set()

    clients = [asyncio.create_task(client()) for _ in range(CLIENTS)]
    try:
        await asyncio.wait_for(all_running.wait(), 60)
        before = sum(seen.values())
        await change(version_actions.load_version, operator, "simple", 2)
        await reconcile_once(server)  # loads version 2 next to 1 while traffic flows
        await change(version_actions.activate, operator, "simple", 2)
        await reconcile_once(server)  # switches
        await change(version_actions.unload_version, operator, "simple", 1)
        await reconcile_once(server)  # drains and unloads version 1 under traffic
        await asyncio.wait_for(saw_new.wait(), 60)
        after_switch = sum(seen.values())
        target = after_switch + 4 * CLIENTS
        while sum(seen.values()) < target and not failures:
            await asyncio.sleep(0)
        version_1_unloaded = not server.model_ready("simple", 1)
    finally:
        stop.set()
        await asyncio.gather(*clients)
        await server.stop()

    assert failures == []
    assert seen[1] > 0 and seen[2] >= 4 * CLIENTS
    assert sum(seen.values()) > before
    assert version_1_unloaded
