"""The memory budget: on-demand loads, one load for many waiting requests, LRU eviction and refusals."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.backends import Backend, register_backend
from engine.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from engine.errors import LoadError, Unavailable
from engine.serving.lifecycle import ModelManager
from engine.serving.memory_budget import MemoryBudgetExceeded, MemoryGovernor
from engine.serving.model_status import ModelState
from engine.serving.server import InferenceServer
from engine.settings import MemoryBudgetSettings, read_engine_settings
from engine.types import InferenceRequest

SIZE = 1000  # bytes of each test model's weights file: what a load of it is charged with a zero measure


@register_backend
class BallastBackend(Backend):
    """A real (numpy) plugin backend holding its weights file in memory: Y = X + 1."""

    name = "test_ballast"
    load_started: threading.Event | None = None
    load_gate: threading.Event | None = None
    execute_gate: threading.Event | None = None
    executing: threading.Event | None = None
    opened = 0
    closed = 0

    def load(self) -> None:
        type(self).opened += 1
        if BallastBackend.load_started is not None:
            BallastBackend.load_started.set()
        if BallastBackend.load_gate is not None:
            BallastBackend.load_gate.wait(timeout=30)
        self.weights = np.fromfile(self.version_path / "weights", dtype=np.uint8)

    def execute(self, batch):
        if BallastBackend.executing is not None:
            BallastBackend.executing.set()
        if BallastBackend.execute_gate is not None:
            BallastBackend.execute_gate.wait(timeout=30)
        return {"Y": batch["X"] + 1}

    def unload(self) -> None:
        type(self).closed += 1
        self.weights = None


@pytest.fixture(autouse=True)
def reset_backend():
    yield
    for gate in (BallastBackend.load_gate, BallastBackend.execute_gate):
        if gate is not None:
            gate.set()
    BallastBackend.load_started = BallastBackend.load_gate = None
    BallastBackend.execute_gate = BallastBackend.executing = None
    BallastBackend.opened = BallastBackend.closed = 0


def config(name: str, **parameters: str) -> ModelConfig:
    return ModelConfig(
        name=name,
        backend="test_ballast",
        max_batch_size=8,
        input=[TensorConfig("X", "TYPE_FP32", [2])],
        output=[TensorConfig("Y", "TYPE_FP32", [2])],
        dynamic_batching=DynamicBatching(),
        parameters=parameters,
    )


def version_dir(root: Path, name: str) -> Path:
    path = root / name / "1"
    path.mkdir(parents=True)
    (path / "weights").write_bytes(b"\1" * SIZE)
    return path


def request(name: str) -> InferenceRequest:
    return InferenceRequest(model_name=name, inputs={"X": np.ones((1, 2), np.float32)}, batch_size=1)


def zero(pools):
    """A measure that sees no growth: every load is charged its files' size, exactly."""
    return dict.fromkeys(pools, 0)


def governed(budget: int | None, timeout: float = 30.0) -> ModelManager:
    return ModelManager(
        budget=MemoryGovernor({"host": budget} if budget else {}, cold_start_timeout=timeout, sample=zero)
    )


async def load(manager: ModelManager, root: Path, name: str, **parameters: str) -> None:
    await manager.load(config(name, **parameters), {1: version_dir(root, name)})


async def answer(manager: ModelManager, name: str) -> list:
    return (await manager.get(name).infer(request(name))).outputs["Y"].tolist()


def resident(manager: ModelManager) -> set[str]:
    return {
        name
        for name, entry in manager.models.items()
        if entry.versions[1].config.backend_name != "ensemble" and entry.versions[1].residency.resident
    }


async def test_it_answers_a_cold_on_demand_request_after_its_load(tmp_path):
    manager = governed(None)
    await load(manager, tmp_path, "a", on_demand="true")
    status = manager.status("a").versions[1]
    assert status.state is ModelState.READY
    assert not status.memory.resident and status.memory.loads == 1 and status.memory.on_demand
    assert status.memory.footprint == {"host": 0}
    assert await answer(manager, "a") == [[2.0, 2.0]]
    memory = manager.status("a").versions[1].memory
    assert memory.resident and memory.loads == 2 and memory.cold_start_seconds is not None
    assert memory.last_used is not None
    assert manager.budget.loads == 2 and manager.budget.cold_start_count == 1
    await manager.stop()


async def test_it_loads_once_for_ten_concurrent_requests(tmp_path):
    manager = governed(None)
    await load(manager, tmp_path, "a", on_demand="true")
    BallastBackend.load_started, BallastBackend.load_gate = threading.Event(), threading.Event()
    opened = BallastBackend.opened
    requests = [asyncio.create_task(answer(manager, "a")) for _ in range(10)]
    assert await asyncio.to_thread(BallastBackend.load_started.wait, 30)
    served = manager.get("a")
    assert served.residency.waiting == 10
    BallastBackend.load_gate.set()
    assert await asyncio.gather(*requests) == [[[2.0, 2.0]]] * 10
    assert BallastBackend.opened == opened + 1 and served.residency.loads == 2
    await manager.stop()


async def test_it_refuses_a_request_past_the_cold_start_timeout_with_503(tmp_path):
    manager = governed(None, timeout=0.001)
    await load(manager, tmp_path, "a", on_demand="true")
    BallastBackend.load_started, BallastBackend.load_gate = threading.Event(), threading.Event()
    with pytest.raises(Unavailable, match="loading on demand and was not ready within 0.001 s") as refused:
        await answer(manager, "a")
    assert refused.value.status == 503
    BallastBackend.load_gate.set()
    manager.budget.cold_start_timeout = 30.0
    assert await answer(manager, "a") == [[2.0, 2.0]]  # the same load, not a second one
    assert manager.get("a").residency.loads == 2
    await manager.stop()


async def test_it_evicts_the_least_recently_used_idle_on_demand_model(tmp_path):
    manager = governed(3 * SIZE)
    for name in "abcd":
        await load(manager, tmp_path, name, on_demand="true")
    for name in "abc":
        await answer(manager, name)
    await answer(manager, "a")  # b is now the least recently used
    await answer(manager, "d")
    assert resident(manager) == {"a", "c", "d"}
    assert manager.budget.evictions == 1 and manager.budget.used() == 3 * SIZE
    assert await answer(manager, "b") == [[2.0, 2.0]]  # evicted, loaded again on its next request
    assert resident(manager) == {"a", "b", "d"}
    await manager.stop()


async def test_it_skips_busy_pinned_and_ensemble_needed_models(tmp_path):
    manager = governed(4 * SIZE)
    await load(manager, tmp_path, "busy", on_demand="true")
    await load(manager, tmp_path, "pinned", on_demand="true", pinned="true")
    await load(manager, tmp_path, "needed", on_demand="true")
    await load(manager, tmp_path, "idle", on_demand="true")
    await load(manager, tmp_path, "new", on_demand="true")
    manager.budget.needed_by_ensembles = lambda: {"needed"}
    for name in ("busy", "pinned", "needed", "idle"):
        await answer(manager, name)
    BallastBackend.executing, BallastBackend.execute_gate = threading.Event(), threading.Event()
    in_flight = asyncio.create_task(answer(manager, "busy"))
    assert await asyncio.to_thread(BallastBackend.executing.wait, 30)
    BallastBackend.executing = None
    assert manager.get("busy").busy()
    manager.get("idle").residency.touch()  # the most recently used, yet the only one that may go
    gate, BallastBackend.execute_gate = BallastBackend.execute_gate, None
    assert await answer(manager, "new") == [[2.0, 2.0]]
    assert resident(manager) == {"busy", "pinned", "needed", "new"}
    gate.set()
    assert await in_flight == [[2.0, 2.0]]
    await manager.stop()


async def test_it_refuses_a_load_that_cannot_fit_naming_the_budget(tmp_path):
    manager = governed(2 * SIZE)
    await load(manager, tmp_path, "big")
    await load(manager, tmp_path, "bigger")
    with pytest.raises(MemoryBudgetExceeded) as refused:
        await load(manager, tmp_path, "third")
    message = refused.value.message
    assert "failed to load 'third' version 1" in message
    assert "needs about 1000 bytes of host memory and the memory budget of 2 KiB (INFERA_MEMORY_BUDGET_MB)" in message
    assert "the biggest residents: big v1 (1000 bytes), bigger v1 (1000 bytes)" in message
    assert refused.value.budget == 2 * SIZE and refused.value.needed == SIZE
    assert isinstance(refused.value, LoadError) and manager.budget.used() == 2 * SIZE
    await manager.stop()


async def test_it_answers_503_naming_the_budget_when_an_on_demand_model_cannot_fit(tmp_path):
    manager = governed(2 * SIZE)
    await load(manager, tmp_path, "lazy", on_demand="true")
    await load(manager, tmp_path, "big")
    await load(manager, tmp_path, "bigger")
    with pytest.raises(Unavailable, match="could not load on demand: .*INFERA_MEMORY_BUDGET_MB") as refused:
        await answer(manager, "lazy")
    assert refused.value.status == 503
    await manager.stop()


async def test_it_never_exceeds_the_budget_under_concurrent_loads(tmp_path):
    manager = governed(3 * SIZE)
    names = [f"m{i}" for i in range(8)]
    for name in names:
        await load(manager, tmp_path, name, on_demand="true")
    budget = manager.budget
    highest = []
    budget.on_event = lambda event: highest.append(budget.used())
    for _ in range(3):
        answers = await asyncio.gather(*(answer(manager, name) for name in names * 2))
        assert answers == [[[2.0, 2.0]]] * 16
    assert budget.evictions > 0 and max(highest) <= 3 * SIZE
    assert len(resident(manager)) <= 3
    await manager.stop()


async def test_it_records_the_footprint_measured_around_a_load(tmp_path):
    readings = iter([100, 100 + 5 * SIZE])
    budget = MemoryGovernor({}, sample=lambda pools: dict.fromkeys(pools, next(readings)))
    manager = ModelManager(budget=budget)
    await load(manager, tmp_path, "a")
    assert manager.status("a").versions[1].memory.footprint == {"host": 5 * SIZE}
    assert manager.get("a").residency.charged == {"host": 5 * SIZE}  # more than its files: the measure counts
    await manager.stop()
    assert budget.used() == 0


def test_it_reads_the_budgets_from_the_environment():
    settings = read_engine_settings({"INFERA_MEMORY_BUDGET_MB": "500", "INFERA_GPU_MEMORY_BUDGET": "0.5"})
    assert settings.memory == MemoryBudgetSettings(500 << 20, None, 0.5, 60.0)
    assert read_engine_settings({"INFERA_GPU_MEMORY_BUDGET": "8e9"}).memory.gpu_bytes == 8_000_000_000
    governor = MemoryGovernor.from_settings(MemoryBudgetSettings(host_bytes=1 << 20, gpu_bytes=1 << 30), gpus=2)
    assert governor.budgets == {"host": 1 << 20, "gpu0": 1 << 30, "gpu1": 1 << 30}


async def test_it_never_evicts_a_model_a_loaded_ensemble_calls(tmp_path):
    server = InferenceServer(gpu_count=0)
    server.memory.budgets, server.memory.sample = {"host": 2 * SIZE}, zero
    await server.start(load_models=False)
    manager = server.manager
    for name in ("step", "other", "third"):
        await load(manager, tmp_path, name, on_demand="true")
    pipeline = ModelConfig(
        name="pipe",
        platform="ensemble",
        max_batch_size=8,
        input=[TensorConfig("IN", "TYPE_FP32", [2])],
        output=[TensorConfig("OUT", "TYPE_FP32", [2])],
        ensemble_scheduling={
            "step": [{"model_name": "step", "model_version": -1, "input_map": {"X": "IN"}, "output_map": {"Y": "OUT"}}]
        },
    )
    (tmp_path / "pipe" / "1").mkdir(parents=True)
    await manager.load(pipeline, {1: tmp_path / "pipe" / "1"})
    ensemble = InferenceRequest(model_name="pipe", inputs={"IN": np.ones((1, 2), np.float32)}, batch_size=1)
    assert (await server.infer(ensemble)).outputs["OUT"].tolist() == [[2.0, 2.0]]
    await answer(manager, "other")  # "step" is now the least recently used
    assert await answer(manager, "third") == [[2.0, 2.0]]
    assert {"step", "third"} <= resident(manager) and "other" not in resident(manager)
    await server.stop()


async def test_it_answers_503_when_a_load_on_demand_fails_and_tries_again_on_the_next_request(tmp_path):
    manager = governed(None)
    await load(manager, tmp_path, "a", on_demand="true")
    weights = tmp_path / "a" / "1" / "weights"
    weights.rename(tmp_path / "kept")
    with pytest.raises(Unavailable, match="model 'a' version 1 could not load on demand: .*weights") as refused:
        await answer(manager, "a")
    assert refused.value.status == 503 and not manager.get("a").residency.resident
    (tmp_path / "kept").rename(weights)
    assert await answer(manager, "a") == [[2.0, 2.0]]
    await manager.stop()


async def test_it_refuses_a_first_load_that_measures_over_the_budget_and_closes_it(tmp_path):
    readings = iter([0, 5 * SIZE])
    budget = MemoryGovernor({"host": 3 * SIZE}, sample=lambda pools: dict.fromkeys(pools, next(readings)))
    manager = ModelManager(budget=budget)
    with pytest.raises(MemoryBudgetExceeded, match="needs about 5 KiB of host memory and the memory budget of 3 KiB"):
        await load(manager, tmp_path, "a")
    assert (BallastBackend.opened, BallastBackend.closed) == (1, 1)
    assert budget.used() == 0 and not budget.charged
    assert "memory budget" in manager.status("a").failure(1)
    await manager.stop()
