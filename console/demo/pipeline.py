"""The demo pipeline `digits_pipeline`: an ensemble of a python preprocess step, `digits` (ONNX) and a python
postprocess step; importable without Django (tests, bench).

- `digits_preprocess`: BYTES `IMAGE` [1], a greyscale (or RGB) PNG of a digit, dark ink on a light background, 8x8
  pixels or larger → FP32 `PIXELS` [64], the 8x8 grid of ink (0-16) the digits model was trained on.
- `digits` → FP32 `probabilities` [10].
- `digits_postprocess`: `PROBABILITIES` [10] → BYTES `LABEL` [1] (the digit) and FP32 `TOP3` [3] with INT32
  `TOP3_CLASSES` [3].
The PNG decoder is the standard library's zlib and numpy: nothing to install, nothing downloaded.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np

PIPELINE_CONFIG = """\
name: "digits_pipeline"
platform: "ensemble"
max_batch_size: 64
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "TOP3" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "TOP3_CLASSES" data_type: TYPE_INT32 dims: [ 3 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "digits_preprocess"
      model_version: -1
      input_map { key: "IMAGE" value: "IMAGE" }
      output_map { key: "PIXELS" value: "pixels" }
    },
    {
      model_name: "digits"
      model_version: -1
      input_map { key: "image" value: "pixels" }
      output_map { key: "probabilities" value: "probabilities" }
    },
    {
      model_name: "digits_postprocess"
      model_version: -1
      input_map { key: "PROBABILITIES" value: "probabilities" }
      output_map [
        { key: "LABEL" value: "LABEL" },
        { key: "TOP3" value: "TOP3" },
        { key: "TOP3_CLASSES" value: "TOP3_CLASSES" }
      ]
    }
  ]
}
"""

PREPROCESS_CONFIG = """\
name: "digits_preprocess"
backend: "python"
max_batch_size: 64
input [ { name: "IMAGE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "PIXELS" data_type: TYPE_FP32 dims: [ 64 ] } ]
dynamic_batching { }
"""

POSTPROCESS_CONFIG = """\
name: "digits_postprocess"
backend: "python"
max_batch_size: 64
input [ { name: "PROBABILITIES" data_type: TYPE_FP32 dims: [ 10 ] } ]
output [
  { name: "LABEL" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "TOP3" data_type: TYPE_FP32 dims: [ 3 ] },
  { name: "TOP3_CLASSES" data_type: TYPE_INT32 dims: [ 3 ] }
]
dynamic_batching { }
"""

PREPROCESS_MODEL_PY = '''\
"""digits_preprocess: PNG bytes -> the 8x8 ink grid (0-16) the digits model reads."""

import struct
import zlib

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy()
            try:
                pixels = np.stack([ink_grid(decode_png(bytes(item))) for item in images.reshape(-1)])
            except ValueError as exc:
                message = f"IMAGE is not a PNG this model reads: {exc}"
                error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", pixels.astype(np.float32))]))
        return responses


def decode_png(data):
    """A non-interlaced 8-bit greyscale, grey+alpha, RGB or RGBA PNG as a 2-D array of grey levels (0-255)."""
    if data[:8] != b"\\x89PNG\\r\\n\\x1a\\n":
        raise ValueError("no PNG signature")
    position, chunks, header = 8, [], None
    while position + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        position += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            chunks.append(body)
        elif kind == b"IEND":
            break
    if header is None:
        raise ValueError("no IHDR chunk")
    width, height, depth, colour, _, _, interlace = header
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"bit depth {depth}, colour type {colour}, interlace {interlace} is not supported")
    if width * height > 4096 * 4096:
        raise ValueError(f"{width}x{height} is too large")
    raw = zlib.decompressobj().decompress(b"".join(chunks), height * (width * channels + 1))
    stride = width * channels
    if len(raw) < height * (stride + 1):
        raise ValueError("the image data is short")
    rows = np.zeros((height, stride), dtype=np.uint8)
    previous = np.zeros(stride, dtype=np.int32)
    for y in range(height):
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        kind = raw[y * (stride + 1)]
        current = unfilter(kind, line, previous, channels)
        rows[y] = current
        previous = current
    image = rows.reshape(height, width, channels).astype(np.float32)
    grey = image[..., :3].mean(axis=2) if channels >= 3 else image[..., 0]
    if channels in (2, 4):  # transparent pixels are background
        alpha = image[..., -1] / 255.0
        grey = grey * alpha + 255.0 * (1 - alpha)
    return grey


def unfilter(kind, line, previous, step):
    if kind == 0:
        return line
    if kind == 2:
        return (line + previous) % 256
    out = np.zeros_like(line)
    for x in range(len(line)):
        left = out[x - step] if x >= step else 0
        up = previous[x]
        corner = previous[x - step] if x >= step else 0
        if kind == 1:
            value = line[x] + left
        elif kind == 3:
            value = line[x] + (left + up) // 2
        elif kind == 4:
            estimate = left + up - corner
            pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
            value = line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)
        else:
            raise ValueError(f"unknown filter type {kind}")
        out[x] = value % 256
    return out


def ink_grid(grey):
    """Dark ink on light paper -> 8x8 cells of ink from 0 to 16 (each cell the mean of its pixels)."""
    height, width = grey.shape
    if height < 8 or width < 8:
        raise ValueError(f"{width}x{height} is smaller than 8x8")
    ink = (255.0 - grey) / 255.0 * 16.0
    # the mean of each cell at once: sums over row bands, then over column bands (cells may differ by one pixel)
    row_edges, col_edges = cell_edges(height), cell_edges(width)
    bands = np.add.reduceat(ink, row_edges[:-1], axis=0)
    cells = np.add.reduceat(bands, col_edges[:-1], axis=1)
    sizes = np.outer(np.diff(row_edges), np.diff(col_edges))
    return (cells / sizes).reshape(64)


def cell_edges(length):
    """Where 8 cells start along `length` pixels; the first (length % 8) cells are one pixel larger."""
    size, extra = divmod(length, 8)
    return np.concatenate([[0], np.cumsum([size + 1] * extra + [size] * (8 - extra))])
'''

POSTPROCESS_MODEL_PY = '''\
"""digits_postprocess: probabilities -> the digit as text and the three likeliest digits."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            probabilities = pb_utils.get_input_tensor_by_name(request, "PROBABILITIES").as_numpy()
            order = np.argsort(-probabilities, axis=1)[:, :3]
            top = np.take_along_axis(probabilities, order, axis=1)
            labels = np.array([[str(int(row[0])).encode()] for row in order], dtype=object)
            responses.append(
                pb_utils.InferenceResponse(
                    [
                        pb_utils.Tensor("LABEL", labels),
                        pb_utils.Tensor("TOP3", top.astype(np.float32)),
                        pb_utils.Tensor("TOP3_CLASSES", order.astype(np.int32)),
                    ]
                )
            )
        return responses
'''

# (model, config, model file name, contents); `digits` itself comes from console.demo.repository
PIPELINE_MODELS: tuple[tuple[str, str, str, bytes], ...] = (
    ("digits_preprocess", PREPROCESS_CONFIG, "model.py", PREPROCESS_MODEL_PY.encode()),
    ("digits_postprocess", POSTPROCESS_CONFIG, "model.py", POSTPROCESS_MODEL_PY.encode()),
)


def write_pipeline(store: Path) -> None:
    """The pipeline's own folders (its steps and the ensemble) in a repository that has or will have `digits`."""
    for name, config, filename, contents in PIPELINE_MODELS:
        (Path(store) / name / "1").mkdir(parents=True, exist_ok=True)
        (Path(store) / name / "config.pbtxt").write_text(config)
        (Path(store) / name / "1" / filename).write_bytes(contents)
    (Path(store) / "digits_pipeline" / "1").mkdir(parents=True, exist_ok=True)
    (Path(store) / "digits_pipeline" / "config.pbtxt").write_text(PIPELINE_CONFIG)


def png_bytes(grey: np.ndarray) -> bytes:
    """A greyscale 8-bit PNG of a 2-D uint8 array (for tests, the bench and the README's example)."""
    height, width = grey.shape
    raw = b"".join(b"\x00" + grey[y].astype(np.uint8).tobytes() for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def digit_image(pixels: np.ndarray, scale: int = 4) -> np.ndarray:
    """A digits-dataset sample (64 values of ink, 0-16) as a `scale`-times larger grey image, dark on light."""
    grid = np.asarray(pixels, dtype=np.float32).reshape(8, 8)
    grey = 255.0 - grid / 16.0 * 255.0
    return np.kron(grey, np.ones((scale, scale))).round().astype(np.uint8)
