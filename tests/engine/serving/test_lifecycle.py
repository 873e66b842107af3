"""Loading, batching, swapping and draining model versions through the lifecycle manager."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.backends import Backend, register_backend
from engine.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig
from engine.errors import BackendError, LoadError, Unavailable
from engine.serving.lifecycle import ModelManager
from engine.serving.model_status import ModelState
from engine.types import InferenceRequest


@register_backend
class ScaleBackend(Backend):
    """A real (numpy) plugin backend: Y = X * factor, where the factor is the version folder's `factor` file."""

    name = "test_scale"
    gate: threading.Event | None = None
    batches: list[int] = []

    def load(self) -> None:
        text = (self.version_path / "factor").read_text()
        if text == "broken":
            raise RuntimeError("weights are corrupt")
        self.factor = float(text)

    def execute(self, batch):
        x = batch["X"]
        type(self).batches.append(int(x.shape[0]))
        if ScaleBackend.gate is not None:
            ScaleBackend.gate.wait(timeout=10)
        if (x < 0).any():
            raise ValueError("negative input")
        return {"Y": x * self.factor}


def make_config(**overrides) -> ModelConfig:
    base = dict(
        name="scale",
        backend="test_scale",
        max_batch_size=16,
        input=[TensorConfig("X", "TYPE_FP32", [2])],
        output=[TensorConfig("Y", "TYPE_FP32", [2])],
        dynamic_batching=DynamicBatching(),
    )
    base.update(overrides)
    return ModelConfig(**base)


def version_dir(tmp_path: Path, version: int, factor: str) -> Path:
    path = tmp_path / "scale" / str(version)
    path.mkdir(parents=True)
    (path / "factor").write_text(factor)
    return path


def request(value: float, batch: int = 1) -> InferenceRequest:
    return InferenceRequest(model_name="scale", inputs={"X": np.full((batch, 2), value, np.float32)}, batch_size=batch)


@pytest.fixture(autouse=True)
def reset_backend():
    ScaleBackend.gate = None
    ScaleBackend.batches = []
    yield
    if ScaleBackend.gate is not None:
        ScaleBackend.gate.set()
    ScaleBackend.gate = None


async def test_it_batches_waiting_requests_and_gives_each_its_own_slice(tmp_path):
    manager = ModelManager()
    await manager.load(make_config(), {1: version_dir(tmp_path, 1, "2")})
    served = manager.get("scale")
    ScaleBackend.gate = threading.Event()
    first = asyncio.create_task(served.infer(request(1)))
    while not ScaleBackend.batches:  # the first batch is now blocked inside the backend
        await asyncio.sleep(0)
    rest = [asyncio.create_task(served.infer(request(v, batch=2))) for v in (3, 4, 5)]
    while served.stats.pending < 3:
        await asyncio.sleep(0)
    ScaleBackend.gate.set()
    results = await asyncio.gather(first, *rest)
    assert ScaleBackend.batches == [1, 6]
    assert results[0].outputs["Y"].tolist() == [[2, 2]]
    for value, result in zip((3, 4, 5), results[1:], strict=True):
        assert result.outputs["Y"].tolist() == [[value * 2] * 2] * 2
    stats = served.stats.to_dict()
    assert stats["inference_count"] == 7 and stats["execution_count"] == 2
    assert stats["inference_stats"]["success"]["count"] == 4
    await manager.stop()


async def test_it_fails_only_the_batch_whose_backend_raised(tmp_path):
    manager = ModelManager()
    await manager.load(make_config(), {1: version_dir(tmp_path, 1, "2")})
    served = manager.get("scale")
    with pytest.raises(BackendError, match="negative input"):
        await served.infer(request(-1))
    assert (await served.infer(request(1))).outputs["Y"].tolist() == [[2, 2]]
    assert served.stats.fail.count == 1 and served.stats.success.count == 1
    await manager.stop()


async def test_it_keeps_the_serving_version_when_a_load_fails(tmp_path):
    manager = ModelManager()
    await manager.load(make_config(), {1: version_dir(tmp_path, 1, "2")})
    with pytest.raises(LoadError, match="failed to load 'scale' version 2: weights are corrupt"):
        await manager.load(make_config(), {2: version_dir(tmp_path, 2, "broken")})
    assert manager.get("scale").version == 1
    assert (await manager.get("scale").infer(request(1))).outputs["Y"].tolist() == [[2, 2]]
    with pytest.raises(Unavailable, match="weights are corrupt"):
        manager.get("scale", 2)
    await manager.stop()


async def test_it_swaps_versions_under_32_concurrent_callers_without_a_failure(tmp_path):
    manager = ModelManager()
    v1, v2 = version_dir(tmp_path, 1, "2"), version_dir(tmp_path, 2, "3")
    await manager.load(make_config(), {1: v1})
    stop = asyncio.Event()
    seen: set[float] = set()
    failures: list[BaseException] = []

    async def caller() -> int:
        count = 0
        while not stop.is_set():
            try:
                response = await manager.get("scale").infer(request(1))
                seen.add(float(response.outputs["Y"][0, 0]))
                count += 1
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)
                return count
            await asyncio.sleep(0)
        return count

    callers = [asyncio.create_task(caller()) for _ in range(32)]
    for target in ({2: v2}, {1: v1}, {2: v2}):
        await manager.load(make_config(), target)
    stop.set()
    counts = await asyncio.gather(*callers)
    assert failures == []
    assert sum(counts) > 0 and seen == {2.0, 3.0}
    assert manager.get("scale").version == 2
    await manager.stop()


async def test_it_lets_in_flight_requests_finish_before_unloading(tmp_path):
    manager = ModelManager()
    await manager.load(make_config(), {1: version_dir(tmp_path, 1, "2")})
    served = manager.get("scale")
    ScaleBackend.gate = threading.Event()
    running = asyncio.create_task(served.infer(request(1)))
    while not ScaleBackend.batches:
        await asyncio.sleep(0)
    unloading = asyncio.create_task(manager.unload("scale"))
    await asyncio.sleep(0)
    assert served.state is ModelState.UNLOADING and not unloading.done()
    with pytest.raises(Unavailable):
        await served.infer(request(1))
    ScaleBackend.gate.set()
    assert (await running).outputs["Y"].tolist() == [[2, 2]]
    await unloading
    assert served.state is ModelState.UNAVAILABLE


async def test_it_fails_a_gpu_instance_group_on_a_machine_without_gpu(tmp_path):
    manager = ModelManager(gpus=0)
    config = make_config(instance_group=[InstanceGroup(kind="KIND_GPU", count=1)])
    with pytest.raises(LoadError, match="KIND_GPU but this machine has no GPU"):
        await manager.load(config, {1: version_dir(tmp_path, 1, "2")})


async def test_it_runs_instances_of_one_model_concurrently(tmp_path):
    manager = ModelManager()
    config = make_config(instance_group=[InstanceGroup(kind="KIND_CPU", count=2)], max_batch_size=1)
    await manager.load(config, {1: version_dir(tmp_path, 1, "2")})
    served = manager.get("scale")
    assert len(served.instances) == 2
    ScaleBackend.gate = threading.Event()
    tasks = [asyncio.create_task(served.infer(request(1))) for _ in range(2)]
    while len(ScaleBackend.batches) < 2:  # both instances are inside execute at once
        await asyncio.sleep(0.001)
    ScaleBackend.gate.set()
    await asyncio.gather(*tasks)
    await manager.stop()


async def test_it_says_why_an_unversioned_request_finds_no_ready_version(tmp_path):
    manager = ModelManager()
    with pytest.raises(LoadError):
        await manager.load(make_config(), {1: version_dir(tmp_path, 1, "broken")})
    with pytest.raises(Unavailable, match="no version ready: version 1: weights are corrupt"):
        manager.get("scale")


async def test_it_answers_a_lone_request_once_the_queue_delay_passes(tmp_path):
    manager = ModelManager()
    config = make_config(dynamic_batching=DynamicBatching(max_queue_delay_microseconds=500))
    await manager.load(config, {1: version_dir(tmp_path, 1, "2")})
    response = await asyncio.wait_for(manager.get("scale").infer(request(1)), timeout=10)
    assert response.outputs["Y"].tolist() == [[2, 2]]
    await manager.stop()
