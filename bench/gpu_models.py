"""The GPU bench's model: a ResNet-50 traced once, and its variants (backend, instances, batching window) as
a Triton repository."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

MODEL = "resnet50"
MAX_BATCH = 256
TARGET_BATCH = 64  # issue 23: the engine at >= 0.9x of direct torch / onnxruntime CUDA throughput at this batch
# the engine's models, all from one traced file: name -> (backend, instances, max batch, extra parameters, window).
# One caller's sequential batches are held to torch alone, which waits for no one: those models batch with no
# queue delay (equal settings); the concurrent ones wait --queue-delay-us for a batch to fill, as HTTP's model does.
VARIANTS = {
    "resnet50": ("pytorch", 1, MAX_BATCH, {}, False),
    "resnet50_eager": ("pytorch", 1, MAX_BATCH, {"CUDA_GRAPHS": "false"}, False),
    "resnet50_b64": ("pytorch", 1, TARGET_BATCH, {}, True),
    "resnet50_b64_x2": ("pytorch", 2, TARGET_BATCH, {}, True),
    "resnet50_onnx": ("onnxruntime", 1, MAX_BATCH, {}, False),
}


def build_resnet(torch, classes: int = 1000):
    """A ResNet-50 (bottleneck blocks 3-4-6-3, 25.6 M parameters) in plain torch, weights from a fixed seed."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, width, 3, stride, 1, bias=False),
                nn.BatchNorm2d(width),
                nn.ReLU(inplace=True),
                nn.Conv2d(width, cout, 1, bias=False),
                nn.BatchNorm2d(cout),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                if stride != 1 or cin != cout
                else nn.Identity()
            )
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x):
            return self.relu(self.body(x) + self.skip(x))

    torch.manual_seed(0)
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers).eval()


def config_text(
    name: str,
    backend: str,
    instances: int,
    max_batch: int,
    kind: str,
    image: int,
    delay_us: int,
    parameters: dict[str, str],
) -> str:
    """A Triton config.pbtxt for one variant: the dynamic batcher on, instances on GPU 0 (or the CPU)."""
    gpus = " gpus: [ 0 ]" if kind == "KIND_GPU" else ""
    platform_line = 'platform: "pytorch_libtorch"' if backend == "pytorch" else 'platform: "onnxruntime_onnx"'
    lines = [
        f'name: "{name}"',
        platform_line,
        f"max_batch_size: {max_batch}",
        f'input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3, {image}, {image} ] }} ]',
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1000 ] } ]',
        f"instance_group [ {{ count: {instances} kind: {kind}{gpus} }} ]",
        f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}",
    ]
    lines += [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()]
    return "\n".join(lines) + "\n"


def write_repository(
    torch, root: Path, source: Path, image: int, kind: str, delay_us: int, onnx: bool
) -> dict[str, Path]:
    """Trace (and export to ONNX where wanted) the CNN once into `source`; one folder per variant under `root`, a
    Triton repository. Returns the model files by format ('pt', and 'onnx' when exported)."""
    files: dict[str, Path] = {}
    source.mkdir(parents=True, exist_ok=True)
    model = build_resnet(torch)
    example = torch.zeros(1, 3, image, image)
    with torch.inference_mode():
        torch.jit.trace(model, example).save(str(source / "model.pt"))
    files["pt"] = source / "model.pt"
    if onnx:
        with warnings.catch_warnings():  # the TorchScript exporter is deprecated; it needs no onnxscript
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (example,),
                str(source / "model.onnx"),
                input_names=["INPUT__0"],
                output_names=["OUTPUT__0"],
                dynamic_axes={"INPUT__0": {0: "batch"}, "OUTPUT__0": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        files["onnx"] = source / "model.onnx"
    for name, (backend, instances, max_batch, parameters, window) in VARIANTS.items():
        fmt = "pt" if backend == "pytorch" else "onnx"
        if fmt not in files:
            continue
        folder = root / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(files[fmt], folder / "1" / files[fmt].name)
        delay = delay_us if window else 0
        (folder / "config.pbtxt").write_text(
            config_text(name, backend, instances, max_batch, kind, image, delay, parameters)
        )
    return files
