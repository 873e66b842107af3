"""The GPU path on a real CUDA device: graphs, pinned staging, instance streams, placement, IO binding and NVML.

Skipped where torch sees no CUDA device (CI, the 2-core machine); bench/gpu.sh runs this file on a GPU machine
before it measures anything. Self-contained on purpose: the GPU image has torch and onnxruntime but neither Django
nor pytest-asyncio, so nothing here needs the suite's conftest (run with --noconftest there).
"""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no CUDA device", allow_module_level=True)

from engine.backends.base import Device  # noqa: E402
from engine.backends.pytorch import PyTorchBackend  # noqa: E402
from engine.config.model_config import DynamicBatching, InstanceGroup, ModelConfig, TensorConfig  # noqa: E402
from engine.errors import LoadError  # noqa: E402

GPU = Device("GPU", 0)
CHANNELS, SIDE, CLASSES = 3, 16, 10


def small_cnn() -> torch.nn.Module:
    """Two convolutions, a batch norm and a linear head: enough kernels for a graph to matter, seeded."""
    torch.manual_seed(0)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(CHANNELS, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, CLASSES),
    )
    with torch.no_grad():  # a batch norm with statistics of its own, so eval mode is not the identity
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model.eval()


def cnn_config(name: str, *, instances: int = 1, gpus: list[int] | None = None, **parameters: str) -> ModelConfig:
    return ModelConfig(
        name=name,
        platform="pytorch_libtorch",
        max_batch_size=16,
        input=[TensorConfig("INPUT__0", "TYPE_FP32", [CHANNELS, SIDE, SIDE])],
        output=[TensorConfig("OUTPUT__0", "TYPE_FP32", [CLASSES])],
        instance_group=[InstanceGroup(kind="KIND_GPU", count=instances, gpus=gpus or [0])],
        dynamic_batching=DynamicBatching(),
        parameters=dict(parameters),
    )


def write_cnn(repo: Path, config: ModelConfig) -> Path:
    """The CNN traced into `<repo>/<name>/1/model.pt` with a config.pbtxt of `config`."""
    from tests.engine.model_factory import to_pbtxt

    folder = repo / config.name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(to_pbtxt(config))
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.trace(small_cnn(), torch.zeros(1, CHANNELS, SIDE, SIDE)).save(str(folder / "1" / "model.pt"))
    return folder


def reference(images: np.ndarray) -> np.ndarray:
    """The CNN in float64 on the CPU."""
    with torch.inference_mode():
        return small_cnn().double()(torch.from_numpy(images).double()).numpy()


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Within TF32's rounding (cuDNN convolutions use the matrix units' float32 mode by default)."""
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3


def images(rng: np.random.Generator, batch: int) -> np.ndarray:
    return rng.standard_normal((batch, CHANNELS, SIDE, SIDE), dtype=np.float32)


def loaded(tmp_path: Path, config: ModelConfig, device: Device = GPU) -> PyTorchBackend:
    backend = PyTorchBackend(config, write_cnn(tmp_path, config) / "1", device)
    backend.load()
    return backend


def test_it_replays_a_captured_graph_with_the_eager_answer_on_fresh_inputs(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("graphs"))
    rng = np.random.default_rng(1)
    for batch in (4, 4, 8, 4, 8):  # the second batch of a size replays the graph the first captured
        x = images(rng, batch)
        assert_close(backend.execute({"INPUT__0": x})["OUTPUT__0"], reference(x))
    assert backend._graphs.captured == [4, 8]


def test_it_pads_a_batch_up_to_the_graph_of_the_next_bucket(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("buckets"))
    assert backend._graphs.buckets == [1, 2, 4, 8, 16]
    rng = np.random.default_rng(7)
    for batch in (5, 8, 6, 3, 16, 11):  # 5, 8 and 6 share the graph of 8; 3 takes 4's; 11 takes 16's
        x = images(rng, batch)
        got = backend.execute({"INPUT__0": x})["OUTPUT__0"]
        assert got.shape == (batch, CLASSES)
        assert_close(got, reference(x))
    assert backend._graphs.captured == [4, 8, 16]


def test_it_captures_each_size_exactly_when_the_config_says_exact(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("exact", CUDA_GRAPHS="exact"))
    rng = np.random.default_rng(8)
    for batch in (5, 6, 5):
        x = images(rng, batch)
        assert_close(backend.execute({"INPUT__0": x})["OUTPUT__0"], reference(x))
    assert backend._graphs.captured == [5, 6]


def test_it_runs_eagerly_when_the_config_turns_graphs_off(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("eager", CUDA_GRAPHS="false"))
    x = images(np.random.default_rng(2), 5)
    assert_close(backend.execute({"INPUT__0": x})["OUTPUT__0"], reference(x))
    assert backend._graphs is None


def test_it_stages_inputs_in_page_locked_memory_and_runs_on_the_gpu_it_names(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("placed"))
    x = images(np.random.default_rng(3), 3)
    backend.execute({"INPUT__0": x})
    staged = backend._pinned._buffers["INPUT__0"]
    assert torch.from_numpy(staged).is_pinned() and staged.nbytes >= x.nbytes
    assert backend.torch_device == torch.device("cuda", 0)
    assert backend._stream.device == torch.device("cuda", 0)
    assert {p.device for p in backend.model.parameters()} == {torch.device("cuda", 0)}


def test_it_gathers_a_batch_of_requests_straight_into_page_locked_memory(tmp_path) -> None:
    backend = loaded(tmp_path, cnn_config("gathered"))
    rng = np.random.default_rng(6)
    requests = [{"INPUT__0": images(rng, n)} for n in (1, 3, 2)]
    for request in requests:
        request["INPUT__0"].flags.writeable = False  # as the HTTP decoder hands them over
    batch = backend.prepare(requests)
    assert backend._pinned.holds("INPUT__0", batch["INPUT__0"])
    whole = np.concatenate([r["INPUT__0"] for r in requests])
    np.testing.assert_array_equal(batch["INPUT__0"], whole)
    assert_close(backend.execute(batch)["OUTPUT__0"], reference(whole))


def test_each_instance_runs_on_a_stream_of_its_own(tmp_path) -> None:
    first = loaded(tmp_path / "a", cnn_config("first"))
    second = loaded(tmp_path / "b", cnn_config("second"))
    default = torch.cuda.default_stream(0)
    assert first._stream != second._stream
    assert default not in (first._stream, second._stream)


def test_a_gpu_the_machine_lacks_is_refused_at_load(tmp_path) -> None:
    missing = torch.cuda.device_count()
    config = cnn_config("absent", gpus=[missing])
    backend = PyTorchBackend(config, write_cnn(tmp_path, config) / "1", Device("GPU", missing))
    with pytest.raises(LoadError, match=f"GPU {missing} does not exist"):
        backend.load()


def test_two_instances_on_one_gpu_answer_every_concurrent_request_right(tmp_path) -> None:
    """Batches of many sizes on two instances at once: captures on one thread while the other copies and replays."""
    from engine.serving.server import InferenceServer
    from engine.types import InferenceRequest

    write_cnn(tmp_path, cnn_config("pair", instances=2))
    rng = np.random.default_rng(4)
    requests = [images(rng, int(rng.integers(1, 9))) for _ in range(96)]

    async def run() -> tuple[list[np.ndarray], dict]:
        server = InferenceServer(tmp_path)
        await server.start()
        try:
            answers = await asyncio.gather(
                *(
                    server.infer(InferenceRequest(model_name="pair", inputs={"INPUT__0": x}, batch_size=len(x)))
                    for x in requests
                )
            )
            return [a.outputs["OUTPUT__0"] for a in answers], server.statistics("pair")
        finally:
            await server.stop()

    outputs, statistics = asyncio.run(run())
    for x, got in zip(requests, outputs, strict=True):
        assert got.shape == (len(x), CLASSES)
        assert_close(got, reference(x))
    stats = statistics["model_stats"][0]
    assert stats["inference_count"] == sum(len(x) for x in requests)
    assert stats["inference_stats"]["fail"]["count"] == 0


def test_an_onnxruntime_gpu_instance_binds_its_io_on_cuda_and_answers_as_the_cpu(tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip(f"this onnxruntime has no CUDA provider ({', '.join(ort.get_available_providers())})")
    from engine.backends.onnxruntime import OnnxRuntimeBackend
    from tests.engine.model_factory import make_mlp_onnx, mlp_config, mlp_reference

    config = mlp_config()
    config.instance_group = [InstanceGroup(kind="KIND_GPU", count=1, gpus=[0])]
    backend = OnnxRuntimeBackend(config, make_mlp_onnx(tmp_path) / "1", GPU)
    backend.load()
    assert backend._runner is not None and backend._runner.pinned is not None
    x = np.random.default_rng(5).standard_normal((9, 64), dtype=np.float32)
    got = backend.execute({"INPUT0": x})
    (name,) = got
    want = mlp_reference(x)
    assert np.linalg.norm(got[name] - want) / np.linalg.norm(want) < 5e-3


def test_the_device_sampler_reads_the_gpu_through_nvml() -> None:
    from engine.monitoring.devices import DeviceSampler

    sample = DeviceSampler().sample()
    assert sample.gpus, "NVML reported no GPU on a machine where torch sees one"
    gpu = sample.gpus[0]
    assert gpu.memory_total_bytes and gpu.memory_total_bytes > 2**30
    assert gpu.memory_used_bytes is not None and gpu.utilization is not None
