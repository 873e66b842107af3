"""The engine going away: not ready while it drains, and a model still busy after the grace is stopped."""

from __future__ import annotations

import asyncio

import numpy as np
import psutil
import pytest

from engine.errors import InferaError
from engine.frontend import V2App
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest
from tests.engine.frontend.asgi_client import call
from tests.engine.gated_model import GatedModel
from tests.engine.model_factory import make_simple_onnx


def gated_request() -> InferenceRequest:
    return InferenceRequest(model_name="gated", inputs={"INPUT0": np.ones((1, 1), np.float32)}, batch_size=1)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_it_answers_not_ready_with_503_while_draining_and_still_serves(tmp_path):
    make_simple_onnx(tmp_path, name="simple")
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    app = V2App(server)
    try:
        assert (await call(app, "GET", "/v2/health/ready")).status == 200
        server.drain()
        assert not server.is_ready() and server.draining
        ready = await call(app, "GET", "/v2/health/ready")
        assert ready.status == 503 and ready.body == b""
        assert (await call(app, "GET", "/v2/health/live")).status == 200
        x = np.arange(16, dtype=np.int32).reshape(1, 16)
        answer = await server.infer(InferenceRequest("simple", {"INPUT0": x, "INPUT1": x}, batch_size=1))
        assert answer.outputs["OUTPUT0"].tolist() == (x * 2).tolist()
    finally:
        await server.stop()


@pytest.fixture
async def busy(tmp_path):
    """A server whose gated model runs a batch: (server, gate, the running request, the stub's pid)."""
    gated = GatedModel(tmp_path / "pipes")
    gated.write(tmp_path / "models")
    server = InferenceServer(tmp_path / "models", gpu_count=0)
    await server.start()
    running = asyncio.ensure_future(server.infer(gated_request()))
    try:
        yield server, gated, running, await asyncio.to_thread(gated.wait_started)
    finally:
        gated.close()


async def test_it_stops_a_model_still_running_when_the_grace_is_over(busy):
    server, _, running, pid = busy
    await server.stop(grace_seconds=0)  # the batch never finishes: the stub is stopped, the unload goes on
    with pytest.raises(InferaError):
        await running
    assert gone(pid)
    assert server.status("gated").versions == {}


async def test_it_waits_for_a_running_batch_within_the_grace(busy):
    server, gated, running, pid = busy
    stopping = asyncio.ensure_future(server.stop(grace_seconds=3600))
    gated.release()
    answer = await running
    await stopping
    assert answer.outputs["OUTPUT0"].tolist() == [[1.0]]
    assert gone(pid)
