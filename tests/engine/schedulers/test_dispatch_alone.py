"""A lone request at a time of one request at a time runs inline at a cost that company keeps on the thread."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np

from engine.backends import Backend
from engine.backends.base import Device
from engine.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from engine.schedulers.dispatcher import ALONE_BELOW, IN_FLIGHT_WEIGHT, DynamicDispatcher
from engine.serving.instances import ModelInstance
from engine.serving.stats import ModelStats
from engine.types import InferenceRequest
from tests.engine.cpu_clock import FakeClock

CONFIG = ModelConfig(
    name="dear",
    max_batch_size=8,
    input=[TensorConfig("INPUT0", "TYPE_FP32", [4])],
    output=[TensorConfig("INPUT0", "TYPE_FP32", [4])],
    dynamic_batching=DynamicBatching(),
)
COST_NS = 200_000  # dearer than the inline threshold, cheaper than ALONE_EXECUTE_NS


class DearBackend(Backend):
    """Echoes its batch; each execution costs COST_NS on the fake clock and notes (thread, batch size)."""

    name = "dear"
    runs_on_loop = True

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(CONFIG, Path("."), Device("CPU", 0))
        self.clock = clock
        self.runs: list[tuple[int, int]] = []

    def load(self) -> None:
        pass

    def execute(self, batch):
        self.runs.append((threading.get_ident(), len(batch["INPUT0"])))
        self.clock.now += COST_NS
        return batch


def _request() -> InferenceRequest:
    return InferenceRequest(model_name="dear", inputs={"INPUT0": np.ones((1, 4), np.float32)}, batch_size=1)


def _run(scenario) -> tuple[int, list[tuple[int, int]]]:
    """Run scenario(dispatcher) with one instance (threshold 25 µs); the loop's thread and the backend's runs."""
    clock = FakeClock()
    backend = DearBackend(clock)
    instance = ModelInstance("dear-1-0", backend, inline_below_ns=25_000, cost_clock=clock, inline_clock=clock)
    instance.start()

    async def main() -> int:
        dispatcher = DynamicDispatcher("dear", 1, CONFIG, [instance], ModelStats("dear", 1), cores=2)
        dispatcher.start()
        await scenario(dispatcher)
        await dispatcher.stop()
        return threading.get_ident()

    try:
        return asyncio.run(main()), backend.runs
    finally:
        instance.stop()


def test_it_runs_lone_requests_on_the_loop_one_at_a_time() -> None:
    async def scenario(dispatcher: DynamicDispatcher) -> None:
        for _ in range(4):
            await dispatcher.submit(_request())

    loop_thread, runs = _run(scenario)
    threads = [thread for thread, _ in runs]
    assert threads[0] != loop_thread  # unmeasured: the thread, as any first batch
    assert threads[1:] == [loop_thread] * 3


def test_it_keeps_batches_with_company_on_the_thread() -> None:
    async def scenario(dispatcher: DynamicDispatcher) -> None:
        await dispatcher.submit(_request())
        await dispatcher.submit(_request())  # measured alone, inline
        for _ in range(3):
            await asyncio.gather(*(dispatcher.submit(_request()) for _ in range(4)))

    loop_thread, runs = _run(scenario)
    assert runs[1] == (loop_thread, 1)
    assert [size for _, size in runs[2:]] == [4, 4, 4]
    assert all(thread != loop_thread for thread, _ in runs[2:])


def test_it_waits_out_a_lull_before_running_lone_requests_inline_again() -> None:
    lull = 3  # lone requests right after a burst: the running average still remembers the company
    settle = 40  # enough lone requests for the average to fall under ALONE_BELOW from a burst of 8

    async def scenario(dispatcher: DynamicDispatcher) -> None:
        await dispatcher.submit(_request())
        for _ in range(3):
            await asyncio.gather(*(dispatcher.submit(_request()) for _ in range(8)))
        for _ in range(lull + settle):
            await dispatcher.submit(_request())

    loop_thread, runs = _run(scenario)
    lone = [thread == loop_thread for thread, size in runs[4:]]
    assert not any(lone[:lull])
    assert all(lone[settle:])
    assert 8 * (1 - IN_FLIGHT_WEIGHT) ** settle < ALONE_BELOW  # what settle was chosen for
