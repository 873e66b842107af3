"""The ensemble section's repository and load: `digits_pipeline` with its three steps, and the digit images it labels.

The four models are the demo's own (`console/demo/pipeline.py`, `console/demo/repository.py`): the two python steps and
the ensemble as the console seeds them, and `digits` trained as its version 2 is, with the bench's one intra-op and
one inter-op onnxruntime thread added to its config. Training takes seconds, so the ONNX bytes are kept in
bench/results under a key of the training code, and trained again only when that code changes.

Each image is a held-out digits sample drawn 4x larger (32x32) as a greyscale PNG; its expected label is what
`digits` says, in process, for the 8x8 grid the preprocess step reads back from that PNG. Samples on which the
model's top two probabilities lie closer than `MARGIN` are left out, so a batch-dependent rounding cannot flip one.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from bench.direct import cpu_session
from bench.models import ONNX_THREADS, write_if_changed
from console.demo.pipeline import PIPELINE_CONFIG, PIPELINE_MODELS, digit_image, png_bytes
from console.demo.repository import DIGITS_CONFIG, DIGITS_TRAINING, digits_split, train_digits_onnx
from engine.config.text_format import parse_config_pbtxt

PIPELINE = "digits_pipeline"
PREPROCESS = "digits_preprocess"
DIGITS = "digits"
POSTPROCESS = "digits_postprocess"
STEPS = (PREPROCESS, DIGITS, POSTPROCESS)
DIGITS_VERSION = 2
SCALE = 4
MARGIN = 0.01


@dataclass(frozen=True)
class Image:
    """One image of the load and the label it must come back with, as the ensemble's request and the first step's.

    Both carry the PNG as the same binary BYTES `IMAGE` [1, 1]; the first step's also asks for `PIXELS` as binary
    data, which the chained path sends on as it comes.
    """

    body: bytes
    headers: dict[str, str]
    step_body: bytes
    step_headers: dict[str, str]
    label: str


def trained_digits(cache: Path) -> bytes:
    """`digits` version 2's ONNX bytes, trained once per version of the training code and kept in `cache`."""
    source = inspect.getsource(train_digits_onnx) + repr(DIGITS_TRAINING[DIGITS_VERSION])
    path = Path(cache) / f"digits-{DIGITS_VERSION}-{hashlib.sha256(source.encode()).hexdigest()[:12]}.onnx"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        onnx_bytes, _ = train_digits_onnx(DIGITS_VERSION)
        path.write_bytes(onnx_bytes)
    return path.read_bytes()


def write_ensemble_repository(root: Path | str, digits_onnx: bytes) -> Path:
    """Write (or reuse, when already identical) `digits_pipeline`, its two python steps and `digits` under `root`."""
    root = Path(root)
    for name, config, filename, contents in PIPELINE_MODELS:
        (root / name / "1").mkdir(parents=True, exist_ok=True)
        write_if_changed(root / name / "config.pbtxt", config.encode())
        write_if_changed(root / name / "1" / filename, contents)
    (root / DIGITS / str(DIGITS_VERSION)).mkdir(parents=True, exist_ok=True)
    write_if_changed(root / DIGITS / "config.pbtxt", (DIGITS_CONFIG + ONNX_THREADS).encode())
    write_if_changed(root / DIGITS / str(DIGITS_VERSION) / "model.onnx", digits_onnx)
    (root / PIPELINE / "1").mkdir(parents=True, exist_ok=True)  # an ensemble's version folder holds no file
    write_if_changed(root / PIPELINE / "config.pbtxt", PIPELINE_CONFIG.encode())
    return root


def queue_delays(root: Path | str) -> dict[str, int | None]:
    """Each step's `max_queue_delay_microseconds` as its config in `root` says, None without dynamic batching."""
    delays = {}
    for step in STEPS:
        batching = parse_config_pbtxt((Path(root) / step / "config.pbtxt").read_text()).dynamic_batching
        delays[step] = batching.max_queue_delay_microseconds if batching else None
    return delays


def binary_request(inputs: list[tuple[str, str, list[int], bytes]], binary_outputs: tuple[str, ...] = ()):
    """A body in Triton's binary tensor extension and its headers; outputs named here come back binary too."""
    header = {
        "inputs": [
            {"name": name, "shape": shape, "datatype": datatype, "parameters": {"binary_data_size": len(data)}}
            for name, datatype, shape, data in inputs
        ]
    }
    if binary_outputs:
        header["outputs"] = [{"name": name, "parameters": {"binary_data": True}} for name in binary_outputs]
    head = orjson.dumps(header)
    headers = {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(head))}
    return head + b"".join(data for *_, data in inputs), headers


def image_request(png: bytes, label: str) -> Image:
    """The requests of one PNG (BYTES `IMAGE` [1, 1]: a 4-byte length, then the bytes)."""
    image = [("IMAGE", "BYTES", [1, 1], len(png).to_bytes(4, "little") + png)]
    return Image(*binary_request(image), *binary_request(image, ("PIXELS",)), label)


def read_back_grid(grey: np.ndarray) -> np.ndarray:
    """The 8x8 ink grid (0-16) the preprocess step reads from a `SCALE`-times image: the mean ink of each cell."""
    ink = (255.0 - grey.astype(np.float32)) / 255.0 * 16.0  # float32, as the step computes it
    return ink.reshape(8, SCALE, 8, SCALE).mean(axis=(1, 3)).reshape(64)


def digit_images(digits_onnx_path: Path) -> list[Image]:
    """The held-out digits as requests, each with the label `digits` gives it in process (close calls left out)."""
    _, _, samples, _ = digits_split()
    greys = [digit_image(sample, SCALE) for sample in samples]
    grids = np.stack([read_back_grid(grey) for grey in greys]).astype(np.float32)
    (probabilities,) = cpu_session(digits_onnx_path).run(["probabilities"], {"image": grids})
    top_two = np.sort(probabilities, axis=1)[:, -2:]
    clear = top_two[:, 1] - top_two[:, 0] >= MARGIN
    labels = probabilities.argmax(axis=1)
    return [
        image_request(png_bytes(grey), str(label)) for grey, label, ok in zip(greys, labels, clear, strict=True) if ok
    ]
