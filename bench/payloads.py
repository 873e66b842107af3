"""The v2 request bodies wrk sends (JSON and Triton binary) and the responses a v2 server answers with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import orjson

from bench.models import BenchModel, sample_inputs


@dataclass(frozen=True)
class Payload:
    """One request body with its extra headers, and the response body a v2 server gives for it."""

    body: bytes
    headers: dict[str, str]
    response: bytes
    response_headers: dict[str, str]


def _tensor_json(name: str, datatype: str, array: np.ndarray, as_float32: bool = False) -> dict:
    # requests carry Python floats, as tritonclient sends them; responses carry float32's shortest form, as the
    # server writes it, so the echo ceiling answers exactly as many bytes as Infera
    data = np.ascontiguousarray(array).reshape(-1) if as_float32 else array.reshape(-1).tolist()
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}


def _tensor_binary(name: str, datatype: str, array: np.ndarray) -> dict:
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype,
        "parameters": {"binary_data_size": array.nbytes},
    }


def _outputs(model: BenchModel, repository: Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(
        str(repository / model.name / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    return dict(zip(model.outputs, session.run(list(model.outputs), inputs), strict=True))


def json_payload(model: BenchModel, repository: Path, batch: int = 1) -> Payload:
    """A v2 JSON request of `batch` rows and the JSON response it gets."""
    inputs = sample_inputs(model, batch)
    outputs = _outputs(model, repository, inputs)
    body = orjson.dumps({"inputs": [_tensor_json(n, model.datatype, a) for n, a in inputs.items()]})
    response = orjson.dumps(
        {
            "model_name": model.name,
            "model_version": "1",
            "outputs": [_tensor_json(n, model.datatype, a, as_float32=True) for n, a in outputs.items()],
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
    return Payload(body, {"Content-Type": "application/json"}, response, {"content-type": "application/json"})


def binary_payload(model: BenchModel, repository: Path, batch: int = 1) -> Payload:
    """A request in Triton's binary tensor extension, outputs asked as binary, and its binary response."""
    inputs = sample_inputs(model, batch)
    outputs = _outputs(model, repository, inputs)
    header = orjson.dumps(
        {
            "inputs": [_tensor_binary(n, model.datatype, a) for n, a in inputs.items()],
            "outputs": [{"name": n, "parameters": {"binary_data": True}} for n in model.outputs],
        }
    )
    body = header + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values())
    response_header = orjson.dumps(
        {
            "model_name": model.name,
            "model_version": "1",
            "outputs": [_tensor_binary(n, model.datatype, a) for n, a in outputs.items()],
        }
    )
    response = response_header + b"".join(np.ascontiguousarray(a).tobytes() for a in outputs.values())
    return Payload(
        body,
        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))},
        response,
        {"content-type": "application/octet-stream", "inference-header-content-length": str(len(response_header))},
    )


def make_payload(model: BenchModel, repository: Path, encoding: str, batch: int = 1) -> Payload:
    """The payload for `encoding` ('json' or 'binary')."""
    if encoding == "json":
        return json_payload(model, repository, batch)
    if encoding == "binary":
        return binary_payload(model, repository, batch)
    raise ValueError(f"unknown body encoding '{encoding}' (json, binary)")
