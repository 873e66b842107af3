"""Model instances: where a batch runs (the event loop or the instance's thread), and how many a group makes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from engine.backends import Backend
from engine.backends.base import Device
from engine.backends.onnxruntime import default_intra_op_threads
from engine.config.model_config import InstanceGroup, ModelConfig
from engine.config.text_format import config_to_dict, parse_config_pbtxt
from engine.serving.instances import ALONE_EXECUTE_NS, PROBE_EVERY, PROBE_FACTOR, ModelInstance
from engine.serving.placement import instance_devices
from engine.serving.repository import with_cpu_instance_counts
from engine.types import InferenceRequest
from tests.engine.cpu_clock import FakeClock

CPU = Device("CPU", 0)


class CostedBackend(Backend):
    """Echoes its input; each execution advances the fake clock by `cost_ns` and notes the thread it ran on."""

    name = "costed"
    runs_on_loop = True

    def __init__(self, clock: FakeClock, cost_ns: int, device: Device = CPU) -> None:
        super().__init__(ModelConfig(name="costed"), Path("."), device)
        self.clock = clock
        self.cost_ns = cost_ns
        self.threads: list[int] = []

    def load(self) -> None:
        pass

    def execute(self, batch):
        self.threads.append(threading.get_ident())
        self.clock.now += self.cost_ns
        return batch


class LoopShyBackend(CostedBackend):
    """A cheap backend that may not run on the loop (as a python model, whose BLS calls wait on the loop)."""

    runs_on_loop = False


def _request() -> InferenceRequest:
    return InferenceRequest(model_name="costed", inputs={"INPUT0": np.zeros((1, 4), np.float32)}, batch_size=1)


async def _run_batches(instance: ModelInstance, count: int) -> None:
    for _ in range(count):
        outputs, _ = await instance.execute([_request()], [1])
        assert outputs[0]["INPUT0"].shape == (1, 4)


def _started(backend: CostedBackend, clock: FakeClock, threshold_ns: int = 25_000) -> ModelInstance:
    instance = ModelInstance("costed-1-0", backend, inline_below_ns=threshold_ns, cost_clock=clock, inline_clock=clock)
    instance.start()
    return instance


def _loop_thread_of(instance: ModelInstance, scenario) -> int:
    """Run `scenario()` on a fresh event loop, stop the instance; the loop's thread id."""

    async def main() -> int:
        await scenario()
        return threading.get_ident()

    try:
        return asyncio.run(main())
    finally:
        instance.stop()


def test_it_runs_a_cheap_models_batches_on_the_event_loop_once_measured() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=2_000)
    instance = _started(backend, clock)

    loop_thread = _loop_thread_of(instance, lambda: _run_batches(instance, 3))
    first, *later = backend.threads
    assert first != loop_thread  # nothing measured yet: the first batch goes to the instance's thread
    assert later == [loop_thread, loop_thread]
    assert instance.execute_ns == 2_000


def test_it_keeps_an_expensive_models_batches_on_the_instance_thread() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=5_000_000)
    instance = _started(backend, clock)

    loop_thread = _loop_thread_of(instance, lambda: _run_batches(instance, 3))
    assert loop_thread not in backend.threads
    assert len(set(backend.threads)) == 1


def test_it_moves_back_to_the_thread_when_batches_grow_expensive() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=1_000)
    instance = _started(backend, clock)

    async def scenario() -> None:
        await _run_batches(instance, 2)  # measured, then inline
        backend.cost_ns = 1_000_000  # the running average climbs (each sample clipped) until it crosses
        await _run_batches(instance, 30)

    loop_thread = _loop_thread_of(instance, scenario)
    on_loop = [thread == loop_thread for thread in backend.threads]
    moved = on_loop.index(False, 1)
    assert on_loop[1:3] == [True, True] and 3 < moved < 20
    assert not any(on_loop[moved:])


def test_it_stays_inline_over_an_outlier() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=2_000)
    instance = _started(backend, clock)

    async def scenario() -> None:
        await _run_batches(instance, 2)
        backend.cost_ns = 5_000_000  # one batch the machine made dear (a page fault storm, a neighbour)
        await _run_batches(instance, 1)
        backend.cost_ns = 2_000
        await _run_batches(instance, 2)

    loop_thread = _loop_thread_of(instance, scenario)
    assert [thread == loop_thread for thread in backend.threads] == [False, True, True, True, True]
    assert instance.inline_ns < 25_000


class PythonHeavyBackend(CostedBackend):
    """Cheap to execute, dear to prepare and split: Python that holds the GIL on a thread as much as inline."""

    def prepare_requests(self, requests):
        self.clock.now += 1_000_000
        return super().prepare_requests(requests)

    def split(self, outputs, batch_sizes):
        self.clock.now += 1_000_000
        return super().split(outputs, batch_sizes)


def test_it_decides_from_the_backends_execution_alone() -> None:
    clock = FakeClock()
    backend = PythonHeavyBackend(clock, cost_ns=2_000)
    instance = _started(backend, clock)

    loop_thread = _loop_thread_of(instance, lambda: _run_batches(instance, 3))
    assert backend.threads[1:] == [loop_thread, loop_thread]  # 2 µs to execute: inline, whatever its Python costs
    assert instance.execute_ns == 2_000


class ThreadDearerBackend(CostedBackend):
    """Costs `thread_cost_ns` on a worker thread and `cost_ns` on the loop's (a thread's wake-up and the GIL
    changing hands count in the worker's CPU time, not in the loop's)."""

    def __init__(self, clock: FakeClock, cost_ns: int, thread_cost_ns: int) -> None:
        super().__init__(clock, cost_ns)
        self.thread_cost_ns = thread_cost_ns
        self.loop_thread: int | None = None

    def execute(self, batch):
        on_loop = threading.get_ident() == self.loop_thread
        self.clock.now += 0 if on_loop else self.thread_cost_ns - self.cost_ns
        return super().execute(batch)


def _dearer_on_the_thread(cost_ns: int, thread_cost_ns: int) -> tuple[ThreadDearerBackend, ModelInstance]:
    clock = FakeClock()
    backend = ThreadDearerBackend(clock, cost_ns, thread_cost_ns)
    return backend, _started(backend, clock, threshold_ns=25_000)


def test_it_tries_a_batch_inline_when_the_threads_measure_overstates_it() -> None:
    backend, instance = _dearer_on_the_thread(cost_ns=2_000, thread_cost_ns=40_000)  # threshold 25 µs

    async def scenario() -> None:
        backend.loop_thread = threading.get_ident()
        await _run_batches(instance, 4)

    loop_thread = _loop_thread_of(instance, scenario)
    first, *later = backend.threads
    assert first != loop_thread  # measured on the thread at 40 µs: above the threshold, within the probe's reach
    assert later == [loop_thread] * 3  # probed inline at 2 µs, and inline from then on
    assert (instance.thread_ns, instance.inline_ns) == (40_000, 2_000)


def test_it_does_not_probe_a_model_far_above_the_threshold() -> None:
    backend, instance = _dearer_on_the_thread(cost_ns=2_000, thread_cost_ns=PROBE_FACTOR * 25_000)

    async def scenario() -> None:
        backend.loop_thread = threading.get_ident()
        await _run_batches(instance, PROBE_EVERY + 2)

    loop_thread = _loop_thread_of(instance, scenario)
    assert loop_thread not in backend.threads and instance.inline_ns is None


def test_it_probes_again_after_a_while_on_the_thread() -> None:
    backend, instance = _dearer_on_the_thread(cost_ns=2_000, thread_cost_ns=40_000)

    async def scenario() -> None:
        backend.loop_thread = threading.get_ident()
        await _run_batches(instance, 2)  # on the thread, then probed inline
        backend.cost_ns = 1_000_000  # the batches grew: the inline average climbs across the threshold
        await _run_batches(instance, 20)
        backend.cost_ns = 2_000  # and shrank again: on the thread, it costs 40 µs there
        await _run_batches(instance, PROBE_EVERY + 1)

    loop_thread = _loop_thread_of(instance, scenario)
    on_loop = [thread == loop_thread for thread in backend.threads]
    assert on_loop[1:3] == [True, True]
    moved = on_loop.index(False, 1)
    assert not any(on_loop[moved : moved + PROBE_EVERY])
    assert on_loop[moved + PROBE_EVERY]  # the probe, after PROBE_EVERY batches on the thread


class TwoClockBackend(CostedBackend):
    """Moves the wall clock by `cost_ns` and the thread's CPU clock by `cpu_ns` with each execution."""

    def __init__(self, wall: FakeClock, cpu: FakeClock, cost_ns: int, cpu_ns: int) -> None:
        super().__init__(wall, cost_ns)
        self.cpu, self.cpu_ns = cpu, cpu_ns

    def execute(self, batch):
        self.cpu.now += self.cpu_ns
        return super().execute(batch)


def test_it_reads_the_wall_clock_inline_and_the_threads_cpu_clock_on_the_thread() -> None:
    wall, cpu = FakeClock(), FakeClock()
    backend = TwoClockBackend(wall, cpu, cost_ns=5_000, cpu_ns=90_000)
    instance = ModelInstance("costed-1-0", backend, inline_below_ns=25_000, cost_clock=cpu, inline_clock=wall)
    instance.start()

    loop_thread = _loop_thread_of(instance, lambda: _run_batches(instance, 2))
    assert backend.threads[0] != loop_thread and backend.threads[1] == loop_thread  # measured there, probed here
    assert (instance.thread_ns, instance.inline_ns) == (90_000, 5_000)


async def _run_alone(instance: ModelInstance, alone: bool) -> None:
    """One batch through `run`, as the dispatcher hands it, said to be alone (or not)."""
    future = asyncio.get_running_loop().create_future()

    def done(result, error) -> None:
        future.set_exception(error) if error is not None else future.set_result(result)

    instance.run([_request()], [1], done, alone)
    outputs, _, _ = await future
    assert outputs[0]["INPUT0"].shape == (1, 4)


def test_it_runs_a_lone_batch_inline_at_a_cost_it_would_keep_on_the_thread_otherwise() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=450_000)  # past the 25 µs threshold's probes, under ALONE_EXECUTE_NS
    instance = _started(backend, clock)

    async def scenario() -> None:
        await _run_alone(instance, alone=False)  # measured on the thread: far above the threshold
        await _run_alone(instance, alone=False)
        await _run_alone(instance, alone=True)  # alone: probed inline, then inline
        await _run_alone(instance, alone=True)
        await _run_alone(instance, alone=False)  # company again: back to the thread

    loop_thread = _loop_thread_of(instance, scenario)
    on_loop = [thread == loop_thread for thread in backend.threads]
    assert backend.cost_ns >= PROBE_FACTOR * 25_000  # never probed inline with company
    assert on_loop == [False, False, True, True, False]
    assert instance.inline_ns == 450_000


def test_it_keeps_a_lone_batch_on_the_thread_above_the_alone_bound() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=ALONE_EXECUTE_NS)
    instance = _started(backend, clock)

    async def scenario() -> None:
        for _ in range(3):
            await _run_alone(instance, alone=True)

    loop_thread = _loop_thread_of(instance, scenario)
    first, *later = backend.threads
    # probed once inline (the thread's measure may overstate), found at the bound, kept on the thread after
    assert first != loop_thread and later[0] == loop_thread and loop_thread not in later[1:]


class NamedThreadBackend(CostedBackend):
    """Notes the OS name of the thread each execution runs on."""

    def execute(self, batch):
        self.os_names = getattr(self, "os_names", [])
        self.os_names.append(Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip())
        return super().execute(batch)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads' OS names are read from Linux's /proc")
def test_it_names_its_worker_thread_after_the_instance_in_the_os() -> None:
    clock = FakeClock()
    backend = NamedThreadBackend(clock, cost_ns=5_000_000)
    instance = ModelInstance("a_long_model_name-12-3", backend, inline_below_ns=0, cost_clock=clock, inline_clock=clock)
    instance.start()

    _loop_thread_of(instance, lambda: _run_batches(instance, 1))
    assert backend.os_names == ["a_long_model_na"]  # Linux keeps a thread name's first 15 bytes


def test_it_runs_inline_only_when_nothing_is_running_on_the_thread() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=1_000)
    instance = _started(backend, clock)
    gate = threading.Event()

    async def scenario() -> tuple[int, bool]:
        await _run_batches(instance, 1)
        busy = instance.call(gate.wait)  # the thread is busy with other work of this instance
        queued = instance.execute([_request()], [1])
        inline_while_busy = instance.runs_inline
        gate.set()
        await busy
        await queued
        return threading.get_ident(), inline_while_busy

    try:
        loop_thread, inline_while_busy = asyncio.run(scenario())
    finally:
        instance.stop()
    assert not inline_while_busy
    assert loop_thread not in backend.threads


@pytest.mark.parametrize(
    "backend",
    [
        lambda clock: LoopShyBackend(clock, cost_ns=1_000),
        lambda clock: CostedBackend(clock, cost_ns=1_000, device=Device("GPU", 0)),
    ],
    ids=["backend-that-may-not", "gpu-instance"],
)
def test_it_never_runs_inline_where_the_backend_or_device_forbids(backend) -> None:
    clock = FakeClock()
    chosen = backend(clock)
    instance = _started(chosen, clock)

    loop_thread = _loop_thread_of(instance, lambda: _run_batches(instance, 3))
    assert loop_thread not in chosen.threads


def test_it_fails_an_inline_batch_through_its_future() -> None:
    clock = FakeClock()
    backend = CostedBackend(clock, cost_ns=1_000)
    instance = _started(backend, clock)

    async def scenario() -> None:
        await _run_batches(instance, 1)
        backend.execute = lambda batch: (_ for _ in ()).throw(ValueError("bad batch"))
        with pytest.raises(ValueError, match="bad batch"):
            await instance.execute([_request()], [1])

    _loop_thread_of(instance, scenario)


ONNX_CPU = 'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'


@pytest.mark.parametrize(
    ("text", "count"),
    [
        (ONNX_CPU + "instance_group [ { kind: KIND_CPU } ]", 2),
        (ONNX_CPU + "instance_group [ { count: 1 kind: KIND_CPU } ]", 1),
        (ONNX_CPU + "instance_group [ { count: 3 kind: KIND_CPU } ]", 3),
        (ONNX_CPU, 2),  # no group: KIND_AUTO on a machine without a GPU is the CPU
        ('name: "m"\nbackend: "pytorch"\ninstance_group [ { kind: KIND_CPU } ]', 1),
        ('name: "m"\nbackend: "python"\ninstance_group [ { kind: KIND_CPU } ]', 1),
    ],
    ids=["onnx-no-count", "onnx-count-1", "onnx-count-3", "onnx-no-group", "pytorch-no-count", "python-no-count"],
)
def test_it_gives_a_cpu_group_without_count_tritons_default(text: str, count: int) -> None:
    config = parse_config_pbtxt(text)
    assert len(instance_devices(config, gpus=0)) == count


def test_it_shows_the_default_count_in_the_completed_config_and_shares_cores() -> None:
    config = with_cpu_instance_counts(parse_config_pbtxt(ONNX_CPU + "instance_group [ { kind: KIND_CPU } ]"))
    assert config_to_dict(config)["instance_group"][0]["count"] == 2
    assert len(instance_devices(config, gpus=0)) == 2
    lone = ModelConfig(name="m", backend="onnxruntime", instance_group=[InstanceGroup(kind="KIND_CPU", count=1)])
    assert default_intra_op_threads(config) == max(1, default_intra_op_threads(lone) // 2)


def test_a_served_onnx_model_without_count_runs_two_instances_and_answers(tmp_path: Path) -> None:
    from engine.serving.server import InferenceServer
    from tests.engine.model_factory import make_simple_onnx

    make_simple_onnx(tmp_path, extra_config="instance_group [ { kind: KIND_CPU } ]\n")

    async def scenario() -> tuple[int, int, list[int]]:
        server = InferenceServer(tmp_path)
        await server.start()
        try:
            served = server.get_model("simple")
            ones = np.ones((1, 16), np.int32)
            request = InferenceRequest(model_name="simple", inputs={"INPUT0": ones, "INPUT1": ones}, batch_size=1)
            response = await server.infer(request)
            count = server.model_config_dict("simple")["instance_group"][0]["count"]
            return len(served.instances), count, response.outputs["OUTPUT0"][0].tolist()
        finally:
            await server.stop()

    instances, count, total = asyncio.run(scenario())
    assert (instances, count) == (2, 2)
    assert total == [2] * 16
