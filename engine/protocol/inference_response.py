"""Encode an InferenceResponse as a v2 body: JSON outputs, binary outputs, or both."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.datatypes import wire_type_of
from engine.errors import InvalidArgument
from engine.protocol.classification import classify
from engine.protocol.inference_request import shared_memory_view
from engine.protocol.tensors import BINARY_ONLY_TYPES, array_to_binary, bytes_to_json_data
from engine.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from engine.shared_memory import SharedMemoryRegistry

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def encode_infer_response(
    response: InferenceResponse,
    request: InferenceRequest | None = None,
    *,
    batched: bool = False,
    shared_memory: SharedMemoryRegistry | None = None,
) -> tuple[bytes, int | None]:
    """Return the body and, when binary outputs follow the JSON, the `Inference-Header-Content-Length`.

    Outputs go in the order the client requested them (all outputs when it named none); each is binary
    when its `binary_data` parameter says so, else when the request's `binary_data_output` does. FP16
    and BF16 are always binary, as is a BYTES output that is not valid UTF-8. `batched` says whether the
    model batches (max_batch_size > 0), which shapes classification results.
    """
    binary_default = bool(request.parameters.get("binary_data_output", False)) if request else False
    selection = selected_outputs(response, request, binary_default, batched)
    outputs: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    for name, array, binary, parameters in selection:
        if "shared_memory_region" in parameters:
            outputs.append(place_in_shared_memory(name, array, parameters, shared_memory))
            continue
        entry, chunk = _encode_output(name, array, binary)
        outputs.append(entry)
        if chunk is not None:
            chunks.append(chunk)
    document: dict[str, Any] = {
        "model_name": response.model_name,
        "model_version": str(response.model_version),
    }
    request_id = response.id or (request.id if request else "")
    if request_id:
        document["id"] = request_id
    if response.parameters:
        document["parameters"] = response.parameters
    document["outputs"] = outputs
    header = orjson.dumps(document, default=_json_fallback, option=_JSON_OPTIONS)
    if not chunks:
        return header, None
    return b"".join([header, *chunks]), len(header)


def selected_outputs(
    response: InferenceResponse, request: InferenceRequest | None, binary_default: bool, batched: bool
) -> list[tuple[str, np.ndarray, bool, dict[str, Any]]]:
    """(name, array, wants binary, its parameters) for each output the response carries back."""
    if request is None or request.requested_outputs is None:
        return [(name, array, binary_default, {}) for name, array in response.outputs.items()]
    selected = []
    for output in request.requested_outputs:
        array = response.outputs.get(output.name)
        if array is None:
            continue
        top_k = output.parameters.get("classification")
        if top_k:
            array = classify(np.asarray(array), top_k, batched)
        binary = bool(output.parameters.get("binary_data", binary_default))
        selected.append((output.name, array, binary, output.parameters))
    return selected


def place_in_shared_memory(
    name: str, array: np.ndarray, parameters: dict[str, Any], shared_memory: SharedMemoryRegistry | None
) -> dict[str, Any]:
    """Write an output into the shared memory its parameters name; its entry says where, and carries no data."""
    array = np.asarray(array)
    datatype = wire_type_of(array)
    data = array_to_binary(datatype, array)
    view = shared_memory_view(shared_memory, name, parameters)
    if len(data) > len(view):
        raise InvalidArgument(
            f"shared memory size specified with the request for output '{name}' ({len(view)} bytes) should be at "
            f"least {len(data)} bytes to hold the results"
        )
    view[: len(data)] = data
    placed = {
        "shared_memory_region": parameters["shared_memory_region"],
        "shared_memory_byte_size": len(data),
    }
    if parameters.get("shared_memory_offset"):
        placed["shared_memory_offset"] = parameters["shared_memory_offset"]
    return {"name": name, "datatype": datatype, "shape": list(array.shape), "parameters": placed}


def _encode_output(name: str, array: np.ndarray, binary: bool) -> tuple[dict[str, Any], bytes | None]:
    """One `outputs` entry and, for a binary output, its bytes."""
    array = np.asarray(array)
    datatype = wire_type_of(array)
    entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
    data: Any = None
    if not binary and datatype not in BINARY_ONLY_TYPES:
        if datatype == "BYTES":
            data = bytes_to_json_data(array)
        else:
            data = np.ascontiguousarray(array).reshape(-1)
    if data is None:
        chunk = array_to_binary(datatype, array)
        entry["parameters"] = {"binary_data_size": len(chunk)}
        return entry, chunk
    entry["data"] = data
    return entry, None


def _json_fallback(value: Any) -> Any:
    """Serialize what orjson's numpy support skips (numpy scalars in parameters, odd dtypes)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"cannot serialize {type(value).__name__} to JSON")
