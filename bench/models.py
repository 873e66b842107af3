"""The benchmark models, built locally with onnx.helper from fixed seeds, written as a Triton repository."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
# every bench server's onnxruntime sessions: one intra-op and one inter-op thread
ONNX_THREADS = (
    'parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n'
    'parameters { key: "inter_op_thread_count" value: { string_value: "1" } }\n'
)
IR_VERSION = 8  # readable by every onnxruntime from 1.14 on, the MLServer venv's included


@dataclass(frozen=True)
class BenchModel:
    """One model of the bench: its name, wire types and shapes (batch dimension excluded)."""

    name: str
    datatype: str  # v2 wire name
    inputs: dict[str, list[int]]
    outputs: dict[str, list[int]]
    max_batch_size: int
    queue_delay_us: int
    versions: int = 1

    @property
    def numpy_dtype(self) -> type[np.generic]:
        return np.int32 if self.datatype == "INT32" else np.float32


# `simple` is Triton's quickstart model; the MLPs are the sizes. mlp_medium (a few MFLOP per sample) is
# the in-process engine model of issue 3. mlp_small has two versions so the hot-swap run can switch between them.
SIMPLE = BenchModel("simple", "INT32", {"INPUT0": [16], "INPUT1": [16]}, {"OUTPUT0": [16], "OUTPUT1": [16]}, 8, 0)
MLP_SMALL = BenchModel("mlp_small", "FP32", {"INPUT0": [64]}, {"OUTPUT0": [10]}, 64, 100, versions=2)
# mlp_medium's batcher waits for no one: issue 3 bounds the overhead of a lone request, which a delay would add to
MLP_MEDIUM = BenchModel("mlp_medium", "FP32", {"INPUT0": [256]}, {"OUTPUT0": [16]}, 64, 0)
MLP_LARGE = BenchModel("mlp_large", "FP32", {"INPUT0": [512]}, {"OUTPUT0": [16]}, 64, 100)
MODELS = {m.name: m for m in (SIMPLE, MLP_SMALL, MLP_MEDIUM, MLP_LARGE)}
# The python section's add_sub: `simple`'s tensors and batcher, computed by bench/add_sub_model.py once in a stub
# process (the python backend's default) and once inside the server; their configs differ only by EXECUTION_MODE.
PY_ADD_SUB = replace(SIMPLE, name="py_add_sub")
PY_ADD_SUB_INPROC = replace(SIMPLE, name="py_add_sub_inproc")
ADD_SUB_SOURCE = Path(__file__).with_name("add_sub_model.py")
MLP_LAYERS = {
    "mlp_small": [64, 256, 256, 10],
    "mlp_medium": [256, 1024, 1024, 16],
    "mlp_large": [512, 2048, 2048, 2048, 2048, 16],
}


def build_simple() -> onnx.ModelProto:
    """Triton's quickstart `simple`: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, INT32 [-1, 16]."""
    shape = ["batch", 16]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    return _finish(graph)


def build_mlp(layers: list[int], seed: int) -> onnx.ModelProto:
    """A ReLU MLP INPUT0 [-1, layers[0]] -> OUTPUT0 [-1, layers[-1]] with He-scaled weights from `seed`."""
    rng = np.random.default_rng(seed)
    nodes, initializers = [], []
    current = "INPUT0"
    for i, (fan_in, fan_out) in enumerate(zip(layers, layers[1:], strict=False)):
        weight = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        bias = np.zeros(fan_out, dtype=np.float32)
        initializers += [numpy_helper.from_array(weight, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        last = i == len(layers) - 2
        gemm_out = "OUTPUT0" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [current, f"w{i}", f"b{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"r{i}"]))
            current = f"r{i}"
    graph = helper.make_graph(
        nodes,
        f"mlp_{'x'.join(map(str, layers))}",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", layers[0]])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", layers[-1]])],
        initializers,
    )
    return _finish(graph)


def _finish(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="infera-bench")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def build_onnx(model: BenchModel, version: int = 1) -> onnx.ModelProto:
    """The ONNX graph of one bench model version.

    Versions share their weights: a switch must not change answers, so every response can be checked the same way
    whichever version served it (the response's model_version says which did).
    """
    if model.name == "simple":
        return build_simple()
    return build_mlp(MLP_LAYERS[model.name], seed=1000 + len(model.name))


def _tensors_pbtxt(section: str, datatype: str, tensors: dict[str, list[int]]) -> str:
    config_type = "TYPE_INT32" if datatype == "INT32" else "TYPE_FP32"
    entries = ",\n".join(
        f'  {{ name: "{name}" data_type: {config_type} dims: [ {", ".join(map(str, dims))} ] }}'
        for name, dims in tensors.items()
    )
    return f"{section} [\n{entries}\n]\n"


def _batching_pbtxt(model: BenchModel, kind: str = "KIND_CPU") -> str:
    return (
        f"max_batch_size: {model.max_batch_size}\n"
        + _tensors_pbtxt("input", model.datatype, model.inputs)
        + _tensors_pbtxt("output", model.datatype, model.outputs)
        + f"instance_group [ {{ kind: {kind} }} ]\n"
        f"dynamic_batching {{ max_queue_delay_microseconds: {model.queue_delay_us} }}\n"
    )


def config_pbtxt(model: BenchModel, kind: str = "KIND_CPU") -> str:
    """The model's config.pbtxt: Triton's default instance count (2 on the CPU), one intra-op thread each, the
    dynamic batcher on."""
    return f'name: "{model.name}"\nplatform: "onnxruntime_onnx"\n' + _batching_pbtxt(model, kind) + ONNX_THREADS


def uploaded_config_pbtxt(model: BenchModel) -> str:
    """The config a user uploads without tuning (the default profile): tensors and `dynamic_batching { }`, with no
    instance count, no threads and no batching window, so the server's defaults for its cores decide them."""
    return (
        f'name: "{model.name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: {model.max_batch_size}\n'
        + _tensors_pbtxt("input", model.datatype, model.inputs)
        + _tensors_pbtxt("output", model.datatype, model.outputs)
        + "dynamic_batching { }\n"
    )


def python_config_pbtxt(model: BenchModel, in_process: bool) -> str:
    """A python-backend config.pbtxt with `model`'s tensors and batcher; `in_process` opts in to the server process."""
    text = f'name: "{model.name}"\nbackend: "python"\n' + _batching_pbtxt(model)
    if in_process:
        text += 'parameters { key: "EXECUTION_MODE" value: { string_value: "in_process" } }\n'
    return text


def write_repository(
    root: Path | str, names: list[str] | None = None, queue_delay_us: int | None = None, *, uploaded: bool = False
) -> Path:
    """Write (or reuse, when already identical) the Triton repository of the bench models under `root`.

    `queue_delay_us` replaces every non-zero batcher delay (`simple` and `mlp_medium` keep 0: their targets are
    about a lone request); `uploaded`: the configs a user uploads without tuning (the default profile).
    """
    root = Path(root)
    for name in names or list(MODELS):
        model = MODELS[name]
        if queue_delay_us is not None and model.max_batch_size >= 64 and model.queue_delay_us:
            model = replace(model, queue_delay_us=queue_delay_us)
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        config = uploaded_config_pbtxt(model) if uploaded else config_pbtxt(model)
        write_if_changed(folder / "config.pbtxt", config.encode())
        for version in range(1, model.versions + 1):
            (folder / str(version)).mkdir(exist_ok=True)
            write_if_changed(folder / str(version) / "model.onnx", build_onnx(model, version).SerializeToString())
    return root


def write_python_repository(root: Path | str) -> Path:
    """Write (or reuse) the python section's repository: add_sub isolated and in process, the same model.py."""
    root = Path(root)
    for model, in_process in ((PY_ADD_SUB, False), (PY_ADD_SUB_INPROC, True)):
        (root / model.name / "1").mkdir(parents=True, exist_ok=True)
        write_if_changed(root / model.name / "config.pbtxt", python_config_pbtxt(model, in_process).encode())
        write_if_changed(root / model.name / "1" / "model.py", ADD_SUB_SOURCE.read_bytes())
    return root


def write_if_changed(path: Path, data: bytes) -> None:
    # rewriting an unchanged file would bump its mtime and make a running server's poller reload it
    if not path.exists() or path.read_bytes() != data:
        path.write_bytes(data)


def sample_inputs(model: BenchModel, batch: int, seed: int = 7) -> dict[str, np.ndarray]:
    """Deterministic inputs of `batch` rows for the model."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, dims in model.inputs.items():
        shape = (batch, *dims)
        if model.datatype == "INT32":
            arrays[name] = rng.integers(0, 100, size=shape, dtype=np.int32)
        else:
            arrays[name] = rng.standard_normal(shape).astype(np.float32)
    return arrays
