"""The pytorch backend: a TorchScript module and a torch.export program built in the test, run on the CPU."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from engine.backends import Device, get_backend
from engine.backends.pytorch import PyTorchBackend, positional_order
from engine.config.model_config import (
    ModelConfig,
    SequenceBatching,
    SequenceControl,
    SequenceControlInput,
    SequenceState,
    TensorConfig,
)
from engine.errors import BackendError, LoadError
from tests.engine.model_factory import addsub_config, make_torch_export, make_torchscript


def loaded(config: ModelConfig, model_dir, device: Device | None = None) -> PyTorchBackend:
    backend = PyTorchBackend(config, model_dir / "1", device or Device())
    backend.load()
    return backend


def batch_of_requests(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(count)
    return [
        {"INPUT__0": rng.standard_normal((1, 16), np.float32), "INPUT__1": rng.standard_normal((1, 16), np.float32)}
        for _ in range(count)
    ]


def test_it_is_the_registered_pytorch_backend():
    assert get_backend("pytorch") is PyTorchBackend


@pytest.mark.parametrize(
    ("make", "platform"), [(make_torchscript, "pytorch_libtorch"), (make_torch_export, "torch_export")]
)
def test_it_adds_and_subtracts_a_batch_of_requests(tmp_path, make, platform):
    config = addsub_config(platform, platform)
    backend = loaded(config, make(tmp_path, name=platform))
    assert backend.model_path.suffix == (".pt2" if platform == "torch_export" else ".pt")
    requests = batch_of_requests(3)
    results = backend.split(backend.execute(backend.prepare(requests)), [1, 1, 1])
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_allclose(result["OUTPUT__0"], request["INPUT__0"] + request["INPUT__1"], rtol=1e-6)
        np.testing.assert_allclose(result["OUTPUT__1"], request["INPUT__0"] - request["INPUT__1"], rtol=1e-6)
        assert result["OUTPUT__0"].dtype == np.float32


def test_it_orders_inputs_and_outputs_by_their_index_suffix(tmp_path):
    config = addsub_config("pt", "pytorch_libtorch")
    config.input.reverse()
    config.output.reverse()
    backend = loaded(config, make_torchscript(tmp_path, name="pt"))
    a, b = np.full((2, 16), 5, np.float32), np.full((2, 16), 2, np.float32)
    outputs = backend.execute({"INPUT__1": b, "INPUT__0": a})
    np.testing.assert_array_equal(outputs["OUTPUT__1"], a - b)
    np.testing.assert_array_equal(outputs["OUTPUT__0"], a + b)


def test_it_keeps_config_order_for_names_without_an_index():
    tensors = [TensorConfig("b", "TYPE_FP32", [1]), TensorConfig("a__0", "TYPE_FP32", [1])]
    assert positional_order(tensors) == tensors


def test_it_converts_inputs_to_the_config_dtype_and_accepts_read_only_arrays(tmp_path):
    backend = loaded(addsub_config("pt", "pytorch_libtorch"), make_torchscript(tmp_path, name="pt"))
    ones = np.ones((1, 16), np.int32)
    ones.flags.writeable = False
    outputs = backend.execute({"INPUT__0": ones, "INPUT__1": ones})
    assert outputs["OUTPUT__0"].dtype == np.float32
    np.testing.assert_array_equal(outputs["OUTPUT__0"], 2 * ones)


def test_it_sets_torch_threads_from_the_parameters(tmp_path):
    import torch

    before = torch.get_num_threads()
    config = addsub_config("pt", "pytorch_libtorch")
    config.parameters = {"INTRA_OP_THREAD_COUNT": "1"}
    try:
        loaded(config, make_torchscript(tmp_path, name="pt"))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_it_fails_a_gpu_load_without_cuda_with_a_reason(tmp_path):
    with pytest.raises(LoadError, match="instance on GPU 0 needs CUDA"):
        loaded(addsub_config("pt", "pytorch_libtorch"), make_torchscript(tmp_path, name="pt"), Device("GPU", 0))


def test_it_turns_a_runtime_failure_into_a_backend_error(tmp_path):
    backend = loaded(addsub_config("pt", "pytorch_libtorch"), make_torchscript(tmp_path, name="pt"))
    with pytest.raises(BackendError, match="torch failed running model 'pt'"):
        backend.execute({"INPUT__0": np.ones((1, 16), np.float32), "INPUT__1": np.ones((1, 15), np.float32)})


def test_it_refuses_string_tensors(tmp_path):
    config = addsub_config("pt", "pytorch_libtorch")
    config.input[0].data_type = "TYPE_STRING"
    with pytest.raises(LoadError, match="cannot serve TYPE_STRING tensor 'INPUT__0'"):
        loaded(config, make_torchscript(tmp_path, name="pt"))


def test_it_reports_a_file_torch_cannot_read(tmp_path):
    model_dir = make_torchscript(tmp_path, name="pt")
    (model_dir / "1" / "model.pt").write_bytes(b"not a model")
    with pytest.raises(LoadError, match="torch could not load 'model.pt'"):
        loaded(addsub_config("pt", "pytorch_libtorch"), model_dir)


def test_it_leaves_torch_unimported_until_a_torch_model_loads():
    code = "import sys, engine.backends.pytorch; assert 'torch' not in sys.modules; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_it_passes_control_and_state_inputs_by_index_and_returns_the_state_output(tmp_path):
    # forward(a, b) -> (a + b, a - b): b is the START control, then the state; a - b is the state output
    model_dir = make_torchscript(tmp_path, name="pt")
    start = SequenceControlInput("START__1", [SequenceControl("CONTROL_SEQUENCE_START", fp32_false_true=[0.0, 1.0])])
    config = ModelConfig(
        name="pt",
        platform="pytorch_libtorch",
        max_batch_size=8,
        input=[TensorConfig("INPUT__0", "TYPE_FP32", [16])],
        output=[TensorConfig("OUTPUT__0", "TYPE_FP32", [16]), TensorConfig("OUTPUT__1", "TYPE_FP32", [16])],
        sequence_batching=SequenceBatching(control_input=[start]),
    )
    inputs = np.ones((2, 16), np.float32)
    outputs = loaded(config, model_dir).execute({"INPUT__0": inputs, "START__1": np.array([[1], [0]], np.float32)})
    np.testing.assert_array_equal(outputs["OUTPUT__0"], [[2] * 16, [1] * 16])

    config.output = [TensorConfig("OUTPUT__0", "TYPE_FP32", [16])]
    config.sequence_batching = SequenceBatching(state=[SequenceState("STATE__1", "OUTPUT__1", "TYPE_FP32", [16])])
    outputs = loaded(config, model_dir).execute({"INPUT__0": inputs, "STATE__1": np.full((2, 16), 3, np.float32)})
    assert list(outputs) == ["OUTPUT__0", "OUTPUT__1"]
    np.testing.assert_array_equal(outputs["OUTPUT__1"], np.full((2, 16), -2))


def test_it_refuses_a_string_correlation_id(tmp_path):
    corrid = SequenceControlInput("CORRID__1", [SequenceControl("CONTROL_SEQUENCE_CORRID", data_type="TYPE_STRING")])
    config = addsub_config("pt", "pytorch_libtorch")
    config.input = config.input[:1]
    config.sequence_batching = SequenceBatching(control_input=[corrid])
    with pytest.raises(LoadError, match="cannot serve TYPE_STRING tensor 'CORRID__1'"):
        loaded(config, make_torchscript(tmp_path, name="pt"))
