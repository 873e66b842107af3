"""The engine facade over a real repository: loading, failures with reasons, index and metadata."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import LoadError, Unavailable
from engine.serving.server import InferenceServer
from engine.types import InferenceRequest
from tests.engine.model_factory import make_simple_onnx


async def test_it_reports_a_model_whose_config_cannot_complete_as_unavailable_with_its_reason(tmp_path):
    make_simple_onnx(tmp_path, name="simple")
    broken = tmp_path / "broken" / "1"
    broken.mkdir(parents=True)
    (broken / "model.onnx").write_bytes(b"not an onnx file")
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    try:
        rows = {row["name"]: row for row in server.repository_index()}
        assert rows["simple"]["state"] == "READY"
        assert rows["broken"]["state"] == "UNAVAILABLE" and rows["broken"]["reason"]
        with pytest.raises(Unavailable, match="model 'broken' has no version ready"):
            server.get_model("broken")
        with pytest.raises(LoadError, match="failed to load 'broken'"):
            await server.load_model("broken")
        x = np.arange(16, dtype=np.int32).reshape(1, 16)
        response = await server.infer(
            InferenceRequest(model_name="simple", inputs={"INPUT0": x, "INPUT1": x}, batch_size=1)
        )
        assert response.outputs["OUTPUT0"].tolist() == (x * 2).tolist()
    finally:
        await server.stop()


async def test_it_loads_a_partial_config_override_completed_from_the_model(tmp_path):
    make_simple_onnx(tmp_path, name="simple", max_batch_size=8)
    server = InferenceServer(tmp_path, gpu_count=0)
    await server.start()
    try:
        await server.load_model("simple", config='{"max_batch_size": "16"}')
        assert server.model_config("simple").max_batch_size == 16
        assert [t.name for t in server.model_config("simple").input] == ["INPUT0", "INPUT1"]
        meta = server.model_metadata("simple")
        assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    finally:
        await server.stop()


async def test_it_is_ready_only_after_the_start_up_load(tmp_path):
    import asyncio
    import threading

    from engine.backends import Backend, register_backend

    loading, release = threading.Event(), threading.Event()

    @register_backend
    class GatedBackend(Backend):
        name = "test_gated"

        def load(self) -> None:
            loading.set()
            release.wait(timeout=10)

        def execute(self, batch):
            return batch

    model = tmp_path / "gated"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "test_gated"\ndefault_model_filename: "weights"\n'
        'input { name: "X" data_type: TYPE_FP32 dims: [1] }\noutput { name: "X" data_type: TYPE_FP32 dims: [1] }\n'
    )
    server = InferenceServer(tmp_path, gpu_count=0)
    starting = asyncio.create_task(server.start())
    await asyncio.to_thread(loading.wait, 10)
    assert not server.is_ready()
    release.set()
    await starting
    assert server.is_ready() and server.model_ready("gated")
    await server.stop()


async def test_it_answers_with_the_name_its_settings_give():
    from engine.settings import read_engine_settings

    settings = read_engine_settings({"INFERA_SERVER_NAME": "triton"})
    server = InferenceServer(settings=settings)
    assert server.name == "triton"
    with pytest.raises(ValueError, match="INFERA_SERVER_NAME"):
        read_engine_settings({"INFERA_SERVER_NAME": " "})
