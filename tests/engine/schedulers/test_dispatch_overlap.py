"""More than one batch in flight per model: idle instances share the queue, a batch forms while others run."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np

from engine.backends import Backend
from engine.backends.base import Device
from engine.config.model_config import DynamicBatching, ModelConfig, TensorConfig
from engine.schedulers.dispatcher import DynamicDispatcher
from engine.serving.instances import ModelInstance
from engine.serving.stats import ModelStats
from engine.types import InferenceRequest

CONFIG = ModelConfig(
    name="gated",
    max_batch_size=8,
    input=[TensorConfig("INPUT0", "TYPE_FP32", [4])],
    output=[TensorConfig("INPUT0", "TYPE_FP32", [4])],
    dynamic_batching=DynamicBatching(),
)


CPU = Device("CPU", 0)


class GatedBackend(Backend):
    """Echoes its batch once the test lets one batch through the gate; notes each batch's size as it starts."""

    name = "gated-tensors"
    runs_on_loop = True

    def __init__(
        self,
        gate: threading.Semaphore,
        started: list[int],
        changed: threading.Condition,
        device: Device = CPU,
    ) -> None:
        super().__init__(CONFIG, Path("."), device)
        self.gate, self.started, self.changed = gate, started, changed

    def load(self) -> None:
        pass

    def execute(self, batch):
        with self.changed:
            self.started.append(len(batch["INPUT0"]))
            self.changed.notify_all()
        if not self.gate.acquire(timeout=30):
            raise TimeoutError("the test never let this batch through")
        return batch


def _request(value: float) -> InferenceRequest:
    return InferenceRequest(model_name="gated", inputs={"INPUT0": np.full((1, 4), value, np.float32)}, batch_size=1)


CHANGED = threading.Condition()  # notified by the backends as each batch starts


async def _started(started: list[int], count: int) -> None:
    """Wait (off the loop, which must keep dispatching) until `count` batches have started."""

    def wait() -> bool:
        with CHANGED:
            return CHANGED.wait_for(lambda: len(started) >= count, timeout=30)

    assert await asyncio.to_thread(wait), f"only {len(started)} of {count} batches started"


def _dispatcher(instances: list[ModelInstance], cores: int = 4) -> DynamicDispatcher:
    dispatcher = DynamicDispatcher("gated", 1, CONFIG, instances, ModelStats("gated", 1), cores=cores)
    dispatcher.start()
    return dispatcher


def _instances(
    count: int, gate: threading.Semaphore, started: list[int], threshold_ns: int, device: Device = CPU
) -> list[ModelInstance]:
    instances = [
        ModelInstance(f"gated-1-{i}", GatedBackend(gate, started, CHANGED, device), inline_below_ns=threshold_ns)
        for i in range(count)
    ]
    for instance in instances:
        instance.start()
    return instances


def _run(scenario, instances: list[ModelInstance]):
    """asyncio.run(scenario()), the instances' threads stopped afterwards."""
    try:
        return asyncio.run(scenario())
    finally:
        for instance in instances:
            instance.stop()


def test_it_shares_a_queue_among_idle_instances_so_two_batches_run_at_once() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(2, gate, started, threshold_ns=0)  # never inline: every batch on a thread

    async def scenario() -> list[float]:
        dispatcher = _dispatcher(instances)
        futures = [dispatcher.submit(_request(i)) for i in range(8)]
        await _started(started, 2)  # both batches have started, neither has finished
        assert sorted(started) == [4, 4]
        gate.release(2)
        responses = await asyncio.gather(*futures)
        await dispatcher.stop()
        return [float(r.outputs["INPUT0"][0, 0]) for r in responses]

    assert _run(scenario, instances) == [float(i) for i in range(8)]


def test_it_forms_the_next_batch_while_one_computes() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(2, gate, started, threshold_ns=0)

    async def scenario() -> None:
        dispatcher = _dispatcher(instances)
        first = [dispatcher.submit(_request(0)) for _ in range(8)]
        await _started(started, 2)
        later = [dispatcher.submit(_request(1)) for _ in range(3)]  # both instances busy: these wait together
        await asyncio.sleep(0)
        assert len(dispatcher.lanes[0].batcher) == 3
        gate.release(1)  # one instance frees up while the other still computes: it takes all three at once
        await _started(started, 3)
        gate.release(2)
        await asyncio.gather(*first, *later)
        await dispatcher.stop()

    _run(scenario, instances)
    assert started[:2] == [4, 4] and started[2:] == [3]


def test_it_does_not_split_batches_that_run_inline() -> None:
    gate, started = threading.Semaphore(100), []
    instances = _instances(2, gate, started, threshold_ns=2**62)  # measured cheap once run: inline from then on

    async def scenario() -> None:
        dispatcher = _dispatcher(instances)
        for instance in instances:  # one measured execution each
            await instance.execute([_request(0)], [1])
        started.clear()
        await asyncio.gather(*(dispatcher.submit(_request(i)) for i in range(8)))
        await dispatcher.stop()

    _run(scenario, instances)
    assert started == [8]


def test_it_holds_the_next_batch_until_the_running_one_ends_where_no_core_is_spare() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(2, gate, started, threshold_ns=0)
    queued_when_answered: list[int] = []

    async def scenario() -> None:
        dispatcher = _dispatcher(instances, cores=2)  # the loop and one batch
        first = [dispatcher.submit(_request(0)) for _ in range(4)]
        await _started(started, 1)
        later = [dispatcher.submit(_request(1)) for _ in range(3)]
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(dispatcher.lanes[0].batcher) == 3  # an instance is idle, no core is: the batch grows instead
        later += [dispatcher.submit(_request(2)) for _ in range(2)]
        batcher = dispatcher.lanes[0].batcher
        first[0].add_done_callback(lambda _: queued_when_answered.append(len(batcher)))
        gate.release(1)
        await _started(started, 2)
        gate.release(1)
        await asyncio.gather(*first, *later)
        await dispatcher.stop()

    _run(scenario, instances)
    assert started == [4, 5]
    assert queued_when_answered == [0]  # the next batch left before the first one's callers were answered


def test_it_counts_no_core_for_gpu_instances() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(2, gate, started, threshold_ns=0, device=Device("GPU", 0))

    async def scenario() -> None:
        dispatcher = _dispatcher(instances, cores=2)
        first = [dispatcher.submit(_request(0)) for _ in range(4)]
        await _started(started, 1)
        later = [dispatcher.submit(_request(1)) for _ in range(3)]
        await _started(started, 2)  # the second GPU instance took them while the first computes
        gate.release(2)
        await asyncio.gather(*first, *later)
        await dispatcher.stop()

    _run(scenario, instances)
    assert started == [4, 3]


def test_it_queues_the_next_batch_behind_the_running_one_once_every_caller_is_back() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(1, gate, started, threshold_ns=0)

    def third_started_without_the_loop() -> bool:
        # blocks the event loop: only a batch already queued on the instance's thread can start meanwhile
        with CHANGED:
            return CHANGED.wait_for(lambda: len(started) >= 3, timeout=30)

    async def scenario() -> None:
        dispatcher = _dispatcher(instances, cores=2)  # the loop and one batch
        first = [dispatcher.submit(_request(0)) for _ in range(4)]
        await _started(started, 1)
        second = [dispatcher.submit(_request(1)) for _ in range(3)]  # 7 in flight: a new peak, nothing staged
        assert instances[0].queued_jobs == 1
        gate.release(1)
        await asyncio.gather(*first)  # the second batch left before the first one's callers were answered
        await _started(started, 2)
        # the first batch's callers come back, as a closed loop's do: with the last of them all 7 are in flight
        third = [dispatcher.submit(_request(2)) for _ in range(4)]
        assert instances[0].queued_jobs == 2  # the third batch waits on the thread behind the second
        gate.release(1)
        assert third_started_without_the_loop()
        gate.release(1)
        await asyncio.gather(*second, *third)
        await dispatcher.stop()

    _run(scenario, instances)
    assert started == [4, 3, 4]


def test_it_stages_nothing_while_the_callers_are_still_coming_back() -> None:
    gate, started = threading.Semaphore(0), []
    instances = _instances(1, gate, started, threshold_ns=0)

    async def scenario() -> None:
        dispatcher = _dispatcher(instances, cores=2)
        first = [dispatcher.submit(_request(0)) for _ in range(4)]
        await _started(started, 1)
        second = [dispatcher.submit(_request(1)) for _ in range(3)]
        gate.release(1)
        await asyncio.gather(*first)
        await _started(started, 2)
        third = [dispatcher.submit(_request(2)) for _ in range(3)]  # one caller of the first batch still away
        assert instances[0].queued_jobs == 1 and len(dispatcher.lanes[0].batcher) == 3
        gate.release(2)
        await asyncio.gather(*second, *third)
        await dispatcher.stop()

    _run(scenario, instances)
    assert started == [4, 3, 3]
