"""The GPU path's decisions, checked where there is no GPU: IO binding, pinned buffers, CUDA graphs, placement.

What runs only on a GPU (the copies, a graph's capture and replay) is measured by bench/gpu.sh; here the choices
are checked, and the parts that also work on the CPU (an IoBinding, a capture that fails) run for real.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.backends import gpu_transfers
from engine.backends.base import Device
from engine.backends.gpu_transfers import (
    HostCopier,
    IoBindingRunner,
    PinnedBuffers,
    fixed_shapes,
    pinned_buffers,
    uses_io_binding,
)
from engine.backends.onnxruntime import OnnxRuntimeBackend
from engine.backends.torch_cuda import CudaGraphs, batch_buckets, first_rows, graphs_wanted
from engine.config.model_config import InstanceGroup, TensorConfig
from engine.serving.placement import instance_devices
from tests.engine.model_factory import make_simple_onnx, simple_config

CPU, GPU = Device("CPU", 0), Device("GPU", 0)
CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_it_binds_io_only_on_a_gpu_whose_session_got_cuda() -> None:
    config = simple_config()
    assert uses_io_binding(GPU, config, CUDA)
    assert not uses_io_binding(CPU, config, CUDA)
    assert not uses_io_binding(GPU, config, ["CPUExecutionProvider"])  # onnxruntime fell back to the CPU
    strings = dataclasses.replace(config, input=[TensorConfig("TEXT", "TYPE_STRING", [1])])
    assert not uses_io_binding(GPU, strings, CUDA)  # strings stay on the host in onnxruntime


def test_an_io_binding_answers_as_session_run(tmp_path) -> None:
    backend = OnnxRuntimeBackend(simple_config(), make_simple_onnx(tmp_path) / "1", CPU)
    backend.load()
    assert backend._runner is None  # a CPU instance runs session.run
    rng = np.random.default_rng(0)
    feeds = {name: rng.integers(-100, 100, (3, 16), dtype=np.int32) for name in ("INPUT0", "INPUT1")}
    names = ["OUTPUT0", "OUTPUT1"]
    bound = IoBindingRunner(backend.session, names, "cpu").run(feeds)
    for got, want in zip(bound, backend.session.run(names, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def test_it_stages_in_pinned_memory_only_where_torch_can_pin() -> None:
    pytest.importorskip("torch")
    import torch

    assert pinned_buffers(CPU) is None
    if not torch.cuda.is_available():
        assert pinned_buffers(GPU) is None  # no CUDA for torch here: plain host memory


def test_it_captures_graphs_only_for_fixed_shapes_on_a_gpu() -> None:
    fixed = simple_config()
    variable = dataclasses.replace(fixed, input=[TensorConfig("INPUT0", "TYPE_INT32", [-1])])
    optional = dataclasses.replace(fixed, input=[TensorConfig("INPUT0", "TYPE_INT32", [16], optional=True)])
    assert fixed_shapes(fixed) and not fixed_shapes(variable) and not fixed_shapes(optional)
    assert graphs_wanted(GPU, fixed)
    assert not graphs_wanted(CPU, fixed)
    assert not graphs_wanted(GPU, variable)
    assert not graphs_wanted(GPU, dataclasses.replace(fixed, parameters={"CUDA_GRAPHS": "false"}))


def test_a_batch_whose_graph_cannot_be_captured_runs_eagerly() -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(4, 2)
    inputs = torch.ones(3, 4)
    with torch.inference_mode():
        graphs = CudaGraphs(torch, model)
        if torch.cuda.is_available():
            pytest.skip("a CUDA device would capture the graph")
        expected = model(inputs)
        torch.testing.assert_close(graphs.run(3, [inputs]), expected)  # the capture fails without CUDA
        torch.testing.assert_close(graphs.run(3, [inputs]), expected)  # and is not tried again
        limited = CudaGraphs(torch, model, max_graphs=0)
        torch.testing.assert_close(limited.run(3, [inputs]), expected)
    assert graphs.captured == [] and limited.captured == []


def test_it_places_instances_on_the_gpus_the_group_names() -> None:
    named = dataclasses.replace(simple_config(), instance_group=[InstanceGroup(kind="KIND_GPU", count=2, gpus=[1])])
    assert instance_devices(named, gpus=2) == [Device("GPU", 1), Device("GPU", 1)]
    every = dataclasses.replace(simple_config(), instance_group=[InstanceGroup(kind="KIND_GPU", count=1)])
    assert instance_devices(every, gpus=2) == [Device("GPU", 0), Device("GPU", 1)]
    auto = dataclasses.replace(simple_config(), backend="onnxruntime", instance_group=[])
    assert {d.kind for d in instance_devices(auto, gpus=1)} == {"GPU"}  # KIND_AUTO on a machine with a GPU


def host_buffers(copier: HostCopier | None = None) -> PinnedBuffers:
    """PinnedBuffers over plain host memory: the copies and the bookkeeping are the same as over pinned memory."""
    return PinnedBuffers(lambda size: np.empty(size, np.uint8), copier)


def test_a_large_host_copy_is_split_over_threads_and_lands_byte_for_byte(monkeypatch) -> None:
    monkeypatch.setattr(gpu_transfers, "PARALLEL_COPY_BYTES", 1000)  # small arrays, many parts
    rng = np.random.default_rng(0)
    sources = [rng.standard_normal((n, 7, 5), dtype=np.float32) for n in (3, 1, 11, 2)]
    sources[1].flags.writeable = False  # a request decoded from a body
    sources.append(rng.standard_normal((4, 7, 5), dtype=np.float32)[::-1])  # not C-contiguous
    copier = HostCopier(threads=3)
    destination = np.empty((sum(len(s) for s in sources), 7, 5), np.float32)
    copier.copy(sources, destination)
    np.testing.assert_array_equal(destination, np.concatenate(sources))
    assert copier._pool is not None  # it did go over threads
    copier.close()


def test_a_small_host_copy_stays_on_the_calling_thread() -> None:
    copier = HostCopier(threads=4)
    destination = np.empty(10, np.int64)
    copier.copy([np.arange(4), np.arange(6)], destination)
    np.testing.assert_array_equal(destination, np.r_[np.arange(4), np.arange(6)])
    assert copier._pool is None


def test_a_gathered_batch_is_staged_without_a_second_copy_and_buffers_are_reused() -> None:
    buffers = host_buffers()
    first = buffers.gather("X", [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)])
    assert buffers.holds("X", first)
    assert buffers.stage("X", first) is first
    np.testing.assert_array_equal(first, [[1, 1, 1], [1, 1, 1], [0, 0, 0]])
    smaller = buffers.stage("X", np.full((1, 3), 5, np.float32))
    assert smaller.ctypes.data == first.ctypes.data  # the same page-locked memory, batch after batch
    assert not buffers.holds("X", np.full((1, 3), 5, np.float32))


def test_requests_that_cannot_share_a_buffer_are_concatenated_as_before() -> None:
    buffers = host_buffers()
    mixed = buffers.gather("X", [np.ones((1, 2), np.float32), np.ones((1, 2), np.float64)])
    assert mixed.dtype == np.float64 and not buffers.holds("X", mixed)
    with pytest.raises(ValueError):  # the error numpy gives the default batching for ragged requests
        buffers.gather("X", [np.ones((1, 2), np.float32), np.ones((1, 3), np.float32)])


def test_batches_are_padded_to_power_of_two_buckets_unless_the_config_says_exact() -> None:
    config = dataclasses.replace(simple_config(), max_batch_size=48)
    assert batch_buckets(config) == [1, 2, 4, 8, 16, 32, 48]
    assert batch_buckets(dataclasses.replace(config, max_batch_size=1)) == [1]
    assert batch_buckets(dataclasses.replace(config, max_batch_size=0)) is None  # one shape: nothing to pad
    assert batch_buckets(dataclasses.replace(config, parameters={"CUDA_GRAPHS": "exact"})) is None
    graphs = CudaGraphs(None, None, buckets=batch_buckets(config))
    assert [graphs.size_for(n) for n in (1, 3, 8, 9, 33, 48)] == [1, 4, 8, 16, 48, 48]
    assert CudaGraphs(None, None).size_for(13) == 13


def test_the_first_rows_of_every_kind_of_result_are_taken() -> None:
    rows = np.arange(12).reshape(6, 2)
    np.testing.assert_array_equal(first_rows(rows, 2), rows[:2])
    assert [r.shape for r in first_rows((rows, rows), 3)] == [(3, 2), (3, 2)]
    assert first_rows({"a": rows}, 1)["a"].shape == (1, 2)
