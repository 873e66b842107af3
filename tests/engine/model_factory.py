"""Build small real models on disk in Triton's layout (`<repo>/<name>/<version>/model.*` + config.pbtxt).

Each `make_*` returns the model folder `<repo>/<name>`; the matching `*_config` returns the same configuration
as a ModelConfig, which is what the factory writes (by hand, in Triton's text format) into config.pbtxt.
torch is imported only inside the torch factories.
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from engine.config.model_config import InstanceGroup, ModelConfig, SequenceControl, SequenceControlInput, TensorConfig

MLP_SIZES = (64, 256, 256, 10)


# ---- config.pbtxt, written by hand


def to_pbtxt(config: ModelConfig) -> str:
    """The config in Triton's protobuf text format (the fields these factories and their callers use)."""
    lines = [f'name: "{config.name}"']
    if config.platform:
        lines.append(f'platform: "{config.platform}"')
    if config.backend:
        lines.append(f'backend: "{config.backend}"')
    lines.append(f"max_batch_size: {config.max_batch_size}")
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for t in tensors:
            lines.append(f"{kind} {{")
            lines.append(f'  name: "{t.name}"\n  data_type: {t.data_type}\n  dims: {t.dims}')
            if t.reshape is not None:
                lines.append(f"  reshape: {{ shape: {t.reshape} }}")
            if t.optional:
                lines.append("  optional: true")
            lines.append("}")
    for group in config.instance_group:
        gpus = f" gpus: {group.gpus}" if group.gpus else ""
        lines.append(f"instance_group {{ count: {group.count} kind: {group.kind}{gpus} }}")
    if config.dynamic_batching is not None:
        batching = config.dynamic_batching
        preferred = f" preferred_batch_size: {batching.preferred_batch_size}" if batching.preferred_batch_size else ""
        delay = batching.max_queue_delay_microseconds
        lines.append(f"dynamic_batching {{{preferred} max_queue_delay_microseconds: {delay} }}")
    for key, value in config.parameters.items():
        lines.append(f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    return "\n".join(lines) + "\n"


def write_model_folder(
    repo: Path,
    config: ModelConfig,
    version: int,
    filename: str,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """Create `<repo>/<name>/<version>/` and config.pbtxt; return the path the model file goes to."""
    model_dir = Path(repo) / config.name
    version_dir = model_dir / str(version)
    version_dir.mkdir(parents=True, exist_ok=True)
    if write_config:
        (model_dir / "config.pbtxt").write_text(to_pbtxt(config) + extra_config)
    return version_dir / filename


def every_sequence_control(corrid_type: str = "TYPE_UINT64") -> list[SequenceControlInput]:
    """One sequence_batching control input of each kind, START/END/READY in int32, fp32 and bool."""
    return [
        SequenceControlInput("START", [SequenceControl("CONTROL_SEQUENCE_START", int32_false_true=[0, 1])]),
        SequenceControlInput("END", [SequenceControl("CONTROL_SEQUENCE_END", fp32_false_true=[0.0, 1.0])]),
        SequenceControlInput("READY", [SequenceControl("CONTROL_SEQUENCE_READY", bool_false_true=[False, True])]),
        SequenceControlInput("CORRID", [SequenceControl("CONTROL_SEQUENCE_CORRID", data_type=corrid_type)]),
    ]


def _tensor(name: str, data_type: str, dims: list[int]) -> TensorConfig:
    return TensorConfig(name=name, data_type=data_type, dims=list(dims))


# ---- ONNX: Triton's `simple` (INT32 add/sub) and an FP32 MLP


def simple_config(name: str = "simple", max_batch_size: int = 8, data_type: str = "TYPE_INT32") -> ModelConfig:
    """Triton's `simple`: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, dims [16]."""
    return ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        input=[_tensor("INPUT0", data_type, [16]), _tensor("INPUT1", data_type, [16])],
        output=[_tensor("OUTPUT0", data_type, [16]), _tensor("OUTPUT1", data_type, [16])],
    )


def make_simple_onnx(
    repo: Path,
    name: str = "simple",
    version: int = 1,
    max_batch_size: int = 8,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """Triton's `simple` add/sub model as ONNX with a dynamic batch dimension (fixed at 1 when unbatched)."""
    import onnx
    from onnx import TensorProto, helper

    batch: Any = "batch" if max_batch_size > 0 else 1
    shape = [batch, 16]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        name,
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("INPUT0", "INPUT1")],
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT0", "OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9  # readable by onnxruntime releases older than this onnx package
    config = simple_config(name, max_batch_size)
    if max_batch_size == 0:
        config.input = [_tensor(t.name, t.data_type, [1, 16]) for t in config.input]
        config.output = [_tensor(t.name, t.data_type, [1, 16]) for t in config.output]
    onnx.save(model, write_model_folder(repo, config, version, "model.onnx", write_config, extra_config))
    return Path(repo) / name


def build_mlp(sizes: tuple[int, ...] = MLP_SIZES, seed: int = 0) -> Any:
    """The torch MLP the factories export: Linear+ReLU layers, deterministic weights from `seed`."""
    import torch

    torch.manual_seed(seed)
    layers: list[Any] = []
    for i, (width_in, width_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(torch.nn.Linear(width_in, width_out))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()


def mlp_reference(inputs: np.ndarray, sizes: tuple[int, ...] = MLP_SIZES, seed: int = 0) -> np.ndarray:
    """What the MLP of these sizes and seed computes, by torch on the CPU."""
    import torch

    with torch.inference_mode():
        return build_mlp(sizes, seed)(torch.from_numpy(inputs)).numpy()


def mlp_config(name: str = "mlp", sizes: tuple[int, ...] = MLP_SIZES, max_batch_size: int = 64) -> ModelConfig:
    """FP32 MLP: INPUT0 [sizes[0]] -> OUTPUT0 [sizes[-1]]."""
    return ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        max_batch_size=max_batch_size,
        input=[_tensor("INPUT0", "TYPE_FP32", [sizes[0]])],
        output=[_tensor("OUTPUT0", "TYPE_FP32", [sizes[-1]])],
    )


def make_mlp_onnx(
    repo: Path,
    name: str = "mlp",
    sizes: tuple[int, ...] = MLP_SIZES,
    version: int = 1,
    seed: int = 0,
    max_batch_size: int = 64,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """An FP32 MLP exported by torch.onnx (TorchScript exporter) with a dynamic batch dimension."""
    import torch

    config = mlp_config(name, sizes, max_batch_size)
    path = write_model_folder(repo, config, version, "model.onnx", write_config, extra_config)
    with warnings.catch_warnings():  # the TorchScript exporter is deprecated, and the one that needs no onnxscript
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            build_mlp(sizes, seed),
            (torch.zeros(1, sizes[0]),),
            str(path),
            input_names=["INPUT0"],
            output_names=["OUTPUT0"],
            dynamic_axes={"INPUT0": {0: "batch"}, "OUTPUT0": {0: "batch"}},
            dynamo=False,
        )
    return Path(repo) / name


# ---- torch: TorchScript and torch.export add/sub


def addsub_config(name: str, platform: str, max_batch_size: int = 8) -> ModelConfig:
    """FP32 add/sub, PyTorch-backend names: INPUT__0, INPUT__1 -> OUTPUT__0 (sum), OUTPUT__1 (difference)."""
    return ModelConfig(
        name=name,
        platform=platform,
        max_batch_size=max_batch_size,
        input=[_tensor("INPUT__0", "TYPE_FP32", [16]), _tensor("INPUT__1", "TYPE_FP32", [16])],
        output=[_tensor("OUTPUT__0", "TYPE_FP32", [16]), _tensor("OUTPUT__1", "TYPE_FP32", [16])],
    )


def _addsub_module() -> Any:
    import torch

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    return AddSub().eval()


def make_torchscript(
    repo: Path,
    name: str = "addsub_torchscript",
    version: int = 1,
    max_batch_size: int = 8,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """The add/sub module scripted and saved as `model.pt` (platform pytorch_libtorch)."""
    import torch

    config = addsub_config(name, "pytorch_libtorch", max_batch_size)
    path = write_model_folder(repo, config, version, "model.pt", write_config, extra_config)
    with warnings.catch_warnings():  # torch deprecates TorchScript; Triton's model.pt is still TorchScript
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.jit.save(torch.jit.script(_addsub_module()), str(path))
    return Path(repo) / name


def make_torch_export(
    repo: Path,
    name: str = "addsub_export",
    version: int = 1,
    max_batch_size: int = 8,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """The add/sub module through torch.export with a dynamic batch dimension, saved as `model.pt2`."""
    import torch

    config = addsub_config(name, "torch_export", max_batch_size)
    path = write_model_folder(repo, config, version, "model.pt2", write_config, extra_config)
    batch = torch.export.Dim("batch", min=1, max=max(max_batch_size, 2))
    example = (torch.zeros(2, 16), torch.zeros(2, 16))
    program = torch.export.export(_addsub_module(), example, dynamic_shapes=({0: batch}, {0: batch}))
    torch.export.save(program, str(path))
    return Path(repo) / name


# ---- python backend

SIMPLE_STRING_SOURCE = textwrap.dedent(
    '''
    """simple_string: decimal numbers as strings, added and subtracted."""
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.model_config = json.loads(args["model_config"])

        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().astype(np.int64)
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy().astype(np.int64)
                outputs = [
                    pb_utils.Tensor(name, np.char.encode((value).astype(str)).astype(object))
                    for name, value in (("OUTPUT0", a + b), ("OUTPUT1", a - b))
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
            return responses
    '''
)


def python_config(
    name: str,
    inputs: list[tuple[str, str, list[int]]],
    outputs: list[tuple[str, str, list[int]]],
    max_batch_size: int = 8,
    instance_kind: str = "",
) -> ModelConfig:
    """A python-backend config from (name, TYPE_*, dims) tuples."""
    groups = [InstanceGroup(kind=instance_kind)] if instance_kind else []
    return ModelConfig(
        name=name,
        backend="python",
        max_batch_size=max_batch_size,
        input=[_tensor(*spec) for spec in inputs],
        output=[_tensor(*spec) for spec in outputs],
        instance_group=groups,
    )


def simple_string_config(name: str = "simple_string", max_batch_size: int = 8) -> ModelConfig:
    """`simple` with TYPE_STRING tensors holding decimal numbers."""
    specs = [(n, "TYPE_STRING", [16]) for n in ("INPUT0", "INPUT1")]
    return python_config(name, specs, [(n, "TYPE_STRING", [16]) for n in ("OUTPUT0", "OUTPUT1")], max_batch_size)


def make_python_model(
    repo: Path,
    name: str,
    source: str,
    config: ModelConfig | None = None,
    version: int = 1,
    write_config: bool = True,
    extra_config: str = "",
) -> Path:
    """Write `source` as `<name>/<version>/model.py` with `config` (default: simple_string's tensors)."""
    config = config or simple_string_config(name)
    config.name = name
    path = write_model_folder(repo, config, version, "model.py", write_config, extra_config)
    path.write_text(source)
    return Path(repo) / name


def make_simple_string(repo: Path, name: str = "simple_string", version: int = 1) -> Path:
    """Triton's `simple_string` idea as a python-backend model."""
    return make_python_model(repo, name, SIMPLE_STRING_SOURCE, simple_string_config(name), version)


class _MakeFolder:
    """Unpickled, it makes a folder: the smallest proof that loading a file ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        import os

        return (os.mkdir, (self.path,))


def make_hostile_pt2(repo: Path, marker: Path, name: str = "hostile", version: int = 1) -> Path:
    """A real torch.export archive whose sample inputs unpickle into `os.mkdir(marker)`.

    torch.export.load reads them with weights_only=True, and on failure again with weights_only=False, which runs the
    payload: loading this file in the server would make `marker`.
    """
    import io
    import zipfile

    import torch

    make_torch_export(repo, name, version)
    path = Path(repo) / name / str(version) / "model.pt2"
    payload = io.BytesIO()
    torch.save(((_MakeFolder(str(marker)),), {}), payload)
    original = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(path, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            target.writestr(info, payload.getvalue() if info.filename.endswith("sample_inputs/model.pt") else data)
    return Path(repo) / name
