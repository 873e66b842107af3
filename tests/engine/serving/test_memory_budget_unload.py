"""Unload gives memory back: for each backend, nothing keeps a backend object alive, no stub is left, and the RSS
stays within a generous bound over load/unload cycles (the bench's footprint section runs a thousand)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import psutil
import pytest

from engine.serving.memory_budget import process_rss
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest
from tests.engine.model_factory import make_mlp_onnx, make_simple_string, make_torchscript

CYCLES = 10
BOUND = 64 << 20  # RSS growth allowed over CYCLES loads and unloads after the first (libraries, caches warmed)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("unload")
    make_mlp_onnx(root, "mlp")
    make_torchscript(root, "addsub")
    make_simple_string(root, "strings")
    return root


def sample(name: str) -> InferenceRequest:
    if name == "mlp":
        inputs = {"INPUT0": np.ones((1, 64), np.float32)}
    elif name == "addsub":
        inputs = {"INPUT__0": np.ones((1, 16), np.float32), "INPUT__1": np.ones((1, 16), np.float32)}
    else:
        inputs = {"INPUT0": np.full((1, 16), b"1", dtype=object), "INPUT1": np.full((1, 16), b"2", dtype=object)}
    return InferenceRequest(model_name=name, inputs=inputs, batch_size=1)


async def cycle(server: InferenceServer, name: str) -> weakref.ref:
    await server.load_model(name)
    served = server.get_model(name)
    await server.infer(sample(name))
    backend = weakref.ref(served.instances[0].backend)
    await server.unload_model(name)
    return backend


@pytest.mark.parametrize("name", ["mlp", "addsub", "strings"])
async def test_it_returns_memory_after_unload(repo, name):
    server = InferenceServer(repo, gpu_count=0)
    await server.start(load_models=False)
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    await cycle(server, name)  # the first load imports the runtime and fills its caches
    before = process_rss()
    for _ in range(CYCLES):
        backend = await cycle(server, name)
    gc.collect()
    assert backend() is None  # nothing holds the last unloaded backend
    assert server.memory.used() == 0 and not server.memory.charged
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= children  # stubs ended
    growth = process_rss() - before
    assert growth <= BOUND, f"{name}: RSS grew {growth >> 20} MiB over {CYCLES} load/unload cycles"
    await server.stop()
