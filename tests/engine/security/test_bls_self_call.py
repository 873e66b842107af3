"""A python model calling itself through BLS is refused with a clear error (issue 32, low): the call waited for one
of the model's own instances, busy waiting on it, and the instance hung for good (stub and in-process alike)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InferaError
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest
from tests.engine.backends.python_models import BLS_SYNC, IN_PROCESS, INT32_PAIR, INT32_SUMS
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

A = np.arange(16, dtype=np.int32).reshape(1, 16)
HANG_GUARD_S = 120  # a regression hangs: fail instead of waiting for ever


@pytest.fixture
async def server(tmp_path: Path):
    make_simple_onnx(tmp_path)
    make_python_model(tmp_path, "bls_stub", BLS_SYNC, python_config("bls_stub", INT32_PAIR, INT32_SUMS))
    config = python_config("bls_here", INT32_PAIR, INT32_SUMS)
    make_python_model(tmp_path, "bls_here", BLS_SYNC, config, extra_config=IN_PROCESS)
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    yield server
    await server.stop(grace_seconds=5)


def calling(model: str, target: str, decoupled: bool = False) -> InferenceRequest:
    parameters = {"target": target, "decoupled": decoupled}
    return InferenceRequest(model_name=model, inputs={"INPUT0": A, "INPUT1": A}, parameters=parameters, batch_size=1)


@pytest.mark.parametrize("model", ["bls_stub", "bls_here"])
async def test_a_model_calling_itself_is_refused_and_keeps_serving(server, model):
    for decoupled in (False, True):
        with pytest.raises(InferaError, match=f"model '{model}' may not call itself through BLS"):
            await asyncio.wait_for(server.infer(calling(model, model, decoupled)), HANG_GUARD_S)
    answer = await asyncio.wait_for(server.infer(calling(model, "simple")), HANG_GUARD_S)  # its instance is free
    np.testing.assert_array_equal(answer.outputs["OUTPUT0"], A + A)
