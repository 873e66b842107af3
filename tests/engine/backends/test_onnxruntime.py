"""The onnxruntime backend: real ONNX models built in the test, executed on the CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from engine.backends import Device, get_backend
from engine.backends.onnxruntime import DEFAULT_MAX_BATCH_SIZE, OnnxRuntimeBackend
from engine.config.model_config import (
    InitialState,
    InstanceGroup,
    ModelConfig,
    SequenceBatching,
    SequenceControl,
    SequenceControlInput,
    SequenceState,
    TensorConfig,
)
from engine.config.validate import validate_config
from engine.errors import BackendError, LoadError
from tests.engine.model_factory import (
    make_mlp_onnx,
    make_simple_onnx,
    mlp_config,
    mlp_reference,
    simple_config,
)


def loaded(config: ModelConfig, model_dir, device: Device | None = None) -> OnnxRuntimeBackend:
    backend = OnnxRuntimeBackend(config, model_dir / "1", device or Device())
    backend.load()
    return backend


def test_it_is_the_registered_onnxruntime_backend():
    assert get_backend("onnxruntime") is OnnxRuntimeBackend


def test_it_adds_and_subtracts_a_batch_of_concatenated_requests(tmp_path):
    backend = loaded(simple_config(), make_simple_onnx(tmp_path))
    requests = [
        {"INPUT0": np.arange(16, dtype=np.int32)[None] + i, "INPUT1": np.full((1, 16), i, dtype=np.int32)}
        for i in range(3)
    ]
    results = backend.split(backend.execute(backend.prepare(requests)), [1, 1, 1])
    for i, result in enumerate(results):
        np.testing.assert_array_equal(result["OUTPUT0"], np.arange(16)[None] + 2 * i)
        np.testing.assert_array_equal(result["OUTPUT1"], np.arange(16)[None])
        assert result["OUTPUT0"].dtype == np.int32


def test_it_feeds_inputs_as_the_model_dtype(tmp_path):
    backend = loaded(simple_config(), make_simple_onnx(tmp_path))
    ones = np.ones((2, 16), dtype=np.int64)
    outputs = backend.execute({"INPUT0": ones, "INPUT1": ones})
    assert outputs["OUTPUT0"].dtype == np.int32
    np.testing.assert_array_equal(outputs["OUTPUT0"], 2 * ones)


def test_it_computes_the_exported_mlp(tmp_path):
    backend = loaded(mlp_config(), make_mlp_onnx(tmp_path, seed=3))
    inputs = np.random.default_rng(0).standard_normal((5, 64), dtype=np.float32)
    outputs = backend.execute({"INPUT0": inputs})
    np.testing.assert_allclose(outputs["OUTPUT0"], mlp_reference(inputs, seed=3), rtol=1e-4, atol=1e-5)
    assert list(outputs) == ["OUTPUT0"]


def test_it_honours_triton_thread_parameters(tmp_path):
    config = simple_config()
    config.parameters = {"intra_op_thread_count": "3", "inter_op_thread_count": "2"}
    options = loaded(config, make_simple_onnx(tmp_path)).session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)


def test_it_shares_the_cores_among_cpu_instances_by_default(tmp_path):
    config = simple_config()
    config.instance_group = [InstanceGroup(count=64, kind="KIND_CPU")]
    options = loaded(config, make_simple_onnx(tmp_path)).session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)


def test_it_rejects_a_thread_count_that_is_not_a_number(tmp_path):
    config = simple_config()
    config.parameters = {"intra_op_thread_count": "many"}
    with pytest.raises(LoadError, match="parameter 'intra_op_thread_count' must be a non-negative integer"):
        loaded(config, make_simple_onnx(tmp_path))


def test_it_fails_a_gpu_load_without_cuda_with_a_reason(tmp_path):
    with pytest.raises(LoadError, match="CUDAExecutionProvider"):
        loaded(simple_config(), make_simple_onnx(tmp_path), Device("GPU", 0))


def test_it_names_the_missing_model_file(tmp_path):
    with pytest.raises(LoadError, match="model.onnx' not found"):
        loaded(simple_config(), tmp_path / "simple")


def test_it_fails_the_batch_with_a_backend_error_when_the_runtime_rejects_it(tmp_path):
    backend = loaded(simple_config(), make_simple_onnx(tmp_path))
    with pytest.raises(BackendError, match="onnxruntime failed running model 'simple'"):
        backend.execute({"INPUT0": np.ones((1, 15), np.int32), "INPUT1": np.ones((1, 15), np.int32)})


def test_it_applies_the_config_reshape_to_inputs_and_outputs(tmp_path):
    config = simple_config()
    for tensor in config.input + config.output:
        tensor.dims, tensor.reshape = [4, 4], [16]
    backend = loaded(config, make_simple_onnx(tmp_path))
    outputs = backend.execute({"INPUT0": np.ones((2, 4, 4), np.int32), "INPUT1": np.ones((2, 4, 4), np.int32)})
    assert outputs["OUTPUT0"].shape == (2, 4, 4)


def test_it_round_trips_bytes_through_onnx_strings(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    version = tmp_path / "echo" / "1"
    version.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["TEXT"], ["ECHO"])],
        "echo",
        [helper.make_tensor_value_info("TEXT", TensorProto.STRING, ["batch", 2])],
        [helper.make_tensor_value_info("ECHO", TensorProto.STRING, ["batch", 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, version / "model.onnx")
    config = OnnxRuntimeBackend.autocomplete(ModelConfig(name="echo", backend="onnxruntime"), version)
    assert config.input[0].data_type == "TYPE_STRING"
    backend = loaded(config, tmp_path / "echo")
    text = np.array([[b"caf\xc3\xa9", b""]], dtype=object)
    echoed = backend.execute({"TEXT": text})["ECHO"]
    assert echoed.dtype == object and echoed.tolist() == [[b"caf\xc3\xa9", b""]]


# ---- auto-completion --------------------------------------------------------------------------------------


def test_it_autocompletes_a_missing_config_from_the_graph(tmp_path):
    model_dir = make_simple_onnx(tmp_path, write_config=False)
    config = OnnxRuntimeBackend.autocomplete(ModelConfig(name="simple", backend="onnxruntime"), model_dir / "1")
    assert config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert config.dynamic_batching is not None
    assert [(t.name, t.data_type, t.dims) for t in config.input] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert [t.name for t in config.output] == ["OUTPUT0", "OUTPUT1"]
    loaded(config, model_dir)


def test_it_keeps_the_batch_dim_when_the_model_cannot_batch(tmp_path):
    model_dir = make_simple_onnx(tmp_path, max_batch_size=0, write_config=False)
    config = OnnxRuntimeBackend.autocomplete(ModelConfig(name="simple", backend="onnxruntime"), model_dir / "1")
    assert config.max_batch_size == 0 and config.dynamic_batching is None
    assert config.input[0].dims == [1, 16]


def test_it_fills_a_partial_config_and_keeps_what_it_says(tmp_path):
    model_dir = make_simple_onnx(tmp_path, write_config=False)
    partial = ModelConfig(
        name="simple",
        platform="onnxruntime_onnx",
        max_batch_size=8,
        input=[TensorConfig("INPUT0", "TYPE_INT32", [16])],
    )
    config = OnnxRuntimeBackend.autocomplete(partial, model_dir / "1")
    assert config.max_batch_size == 8
    assert [t.name for t in config.input] == ["INPUT0", "INPUT1"]
    assert [t.name for t in config.output] == ["OUTPUT0", "OUTPUT1"]
    assert partial.output == []  # the caller's config is left as it was


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"data_type": "TYPE_FP32"}, "input 'INPUT0' is TYPE_FP32 in config but TYPE_INT32 in the model"),
        ({"dims": [15]}, r"input 'INPUT0' has dims \[15\] in config but \[16\] in the model"),
        ({"name": "INPUT9"}, "input 'INPUT9' in config is not in the model"),
    ],
)
def test_it_names_the_tensor_a_config_contradicts(tmp_path, change, message):
    model_dir = make_simple_onnx(tmp_path)
    config = simple_config()
    config.input[0] = dataclasses.replace(config.input[0], **change)
    with pytest.raises(LoadError, match=message):
        OnnxRuntimeBackend.autocomplete(config, model_dir / "1")


def test_it_refuses_batching_a_model_with_a_fixed_first_dimension(tmp_path):
    model_dir = make_simple_onnx(tmp_path, max_batch_size=0)
    with pytest.raises(LoadError, match="no dynamic batch dimension in the model"):
        OnnxRuntimeBackend.autocomplete(simple_config(max_batch_size=8), model_dir / "1")


def test_it_checks_the_config_at_load_too(tmp_path):
    config = simple_config()
    config.output[1] = dataclasses.replace(config.output[1], data_type="TYPE_FP16")
    with pytest.raises(LoadError, match="output 'OUTPUT1' is TYPE_FP16 in config but TYPE_INT32"):
        loaded(config, make_simple_onnx(tmp_path))


# ---- sequence models: control and state tensors ---------------------------------------------------------------


def make_accumulator_onnx(tmp_path):
    """A stateful model: STATE_OUT is INPUT at START, else STATE_IN + INPUT; OUTPUT repeats it, ID echoes CORRID."""
    import onnx
    from onnx import TensorProto, helper

    version = tmp_path / "acc" / "1"
    version.mkdir(parents=True)
    column = ["batch", 1]
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["ONE", "START"], ["KEEP"]),
            helper.make_node("Mul", ["STATE_IN", "KEEP"], ["CARRIED"]),
            helper.make_node("Add", ["INPUT", "CARRIED"], ["STATE_OUT"]),
            helper.make_node("Identity", ["STATE_OUT"], ["OUTPUT"]),
            helper.make_node("Identity", ["CORRID"], ["ID"]),
        ],
        "acc",
        [helper.make_tensor_value_info(n, TensorProto.INT32, column) for n in ("INPUT", "START", "STATE_IN")]
        + [helper.make_tensor_value_info("CORRID", TensorProto.UINT64, column)],
        [helper.make_tensor_value_info(n, TensorProto.INT32, column) for n in ("OUTPUT", "STATE_OUT")]
        + [helper.make_tensor_value_info("ID", TensorProto.UINT64, column)],
        initializer=[helper.make_tensor("ONE", TensorProto.INT32, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, version / "model.onnx")
    return version


def accumulator_config(**fields) -> ModelConfig:
    sequencing = SequenceBatching(
        control_input=[
            SequenceControlInput("START", [SequenceControl("CONTROL_SEQUENCE_START", int32_false_true=[0, 1])]),
            SequenceControlInput("CORRID", [SequenceControl("CONTROL_SEQUENCE_CORRID", data_type="TYPE_UINT64")]),
        ],
        state=[
            SequenceState(
                "STATE_IN", "STATE_OUT", "TYPE_INT32", [1], [InitialState("TYPE_INT32", [1], zero_data=True, name="0")]
            )
        ],
    )
    return ModelConfig(name="acc", backend="onnxruntime", sequence_batching=sequencing, **fields)


def a_sequence_step() -> dict[str, np.ndarray]:
    """Two sequences in one batch: the first starts with 5, the second adds 7 to its state 100."""
    return {
        "INPUT": np.array([[5], [7]], np.int32),
        "START": np.array([[1], [0]], np.int32),
        "STATE_IN": np.array([[100], [100]], np.int32),
        "CORRID": np.array([[11], [12]], np.uint64),
    }


def test_it_leaves_control_and_state_tensors_out_of_an_autocompleted_config(tmp_path):
    version = make_accumulator_onnx(tmp_path)
    config = OnnxRuntimeBackend.autocomplete(accumulator_config(), version)
    assert config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert config.dynamic_batching is None  # the sequence batcher schedules it
    assert [(t.name, t.data_type, t.dims) for t in config.input] == [("INPUT", "TYPE_INT32", [1])]
    assert [t.name for t in config.output] == ["OUTPUT", "ID"]
    validate_config(config)


def test_it_feeds_controls_and_state_and_returns_the_next_state(tmp_path):
    version = make_accumulator_onnx(tmp_path)
    backend = loaded(OnnxRuntimeBackend.autocomplete(accumulator_config(), version), tmp_path / "acc")
    outputs = backend.execute(a_sequence_step())
    assert list(outputs) == ["OUTPUT", "ID", "STATE_OUT"]
    np.testing.assert_array_equal(outputs["STATE_OUT"], [[5], [107]])
    np.testing.assert_array_equal(outputs["OUTPUT"], [[5], [107]])
    assert outputs["ID"].dtype == np.uint64 and outputs["ID"].tolist() == [[11], [12]]


def test_it_serves_a_state_output_the_config_also_lists(tmp_path):
    version = make_accumulator_onnx(tmp_path)
    partial = accumulator_config(max_batch_size=2, output=[TensorConfig("STATE_OUT", "TYPE_INT32", [1])])
    config = OnnxRuntimeBackend.autocomplete(partial, version)
    assert [t.name for t in config.output] == ["STATE_OUT"]
    outputs = loaded(config, tmp_path / "acc").execute(a_sequence_step())
    assert list(outputs) == ["STATE_OUT"]


def test_it_lets_a_variable_state_dim_fit_a_fixed_model_dim(tmp_path):
    version = make_accumulator_onnx(tmp_path)
    config = accumulator_config()
    config.sequence_batching.state[0].dims = [-1]
    OnnxRuntimeBackend.autocomplete(config, version)


def _sequencing_change(path: str, value):
    def change(config: ModelConfig) -> None:
        *parents, last = path.split(".")
        target = config.sequence_batching
        for part in parents:
            target = target[int(part)] if part.isdigit() else getattr(target, part)
        setattr(target, last, value)

    return change


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            _sequencing_change("control_input.0.control", [SequenceControl("CONTROL_SEQUENCE_START", [], [0.0, 1.0])]),
            "control input 'START' is TYPE_FP32 in config but TYPE_INT32 in the model",
        ),
        (
            _sequencing_change("control_input.1.control.0.data_type", "TYPE_INT64"),
            "control input 'CORRID' is TYPE_INT64 in config but TYPE_UINT64 in the model",
        ),
        (
            _sequencing_change("control_input.0.name", "BEGIN"),
            r"control input 'BEGIN' in config is not in the model \(model inputs: INPUT, START, STATE_IN, CORRID\)",
        ),
        (
            _sequencing_change("state.0.output_name", "NEXT"),
            r"state output 'NEXT' in config is not in the model \(model outputs: OUTPUT, STATE_OUT, ID\)",
        ),
        (_sequencing_change("state.0.dims", [2]), r"state input 'STATE_IN' has dims \[2\] in config but \[1\]"),
        (_sequencing_change("control_input", []), "the model needs input 'START', which the config does not list"),
    ],
)
def test_it_names_the_sequence_tensor_a_model_contradicts(tmp_path, change, message):
    make_accumulator_onnx(tmp_path)
    config = accumulator_config(
        max_batch_size=2,
        input=[TensorConfig("INPUT", "TYPE_INT32", [1])],
        output=[TensorConfig("OUTPUT", "TYPE_INT32", [1])],
    )
    change(config)
    with pytest.raises(LoadError, match=message):
        loaded(config, tmp_path / "acc")
