"""Encode an InferenceResponse as a v2 body: JSON outputs, binary outputs, or both."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.config.datatypes import wire_type_of
from engine.errors import InvalidArgument
from engine.protocol.classification import classify
from engine.protocol.inference_request import shared_memory_range
from engine.protocol.tensors import BINARY_ONLY_TYPES, array_to_binary, bytes_to_json_data
from engine.types import BatchOutputs, InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from engine.protocol.shared_memory import CallerRegions

_JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY
_NOT_PLAIN = object()  # a batch output the plain path cannot write (BYTES, FP16, a dtype orjson refuses)


def encode_infer_response(
    response: InferenceResponse,
    request: InferenceRequest | None = None,
    *,
    batched: bool = False,
    shared_memory: CallerRegions | None = None,
) -> tuple[bytes, int | None]:
    """Return the body and, when binary outputs follow the JSON, the `Inference-Header-Content-Length`.

    Outputs go in the order the client requested them (all outputs when it named none); each is binary
    when its `binary_data` parameter says so, else when the request's `binary_data_output` does. FP16
    and BF16 are always binary, as is a BYTES output that is not valid UTF-8. `batched` says whether the
    model batches (max_batch_size > 0), which shapes classification results.
    """
    if request is not None:
        plain = plain_json_body(response, request)
        if plain is not None:
            return plain, None
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
    name: str, array: np.ndarray, parameters: dict[str, Any], shared_memory: CallerRegions | None
) -> dict[str, Any]:
    """Write an output into the shared memory its parameters name; its entry says where, and carries no data."""
    array = np.asarray(array)
    datatype = wire_type_of(array)
    data = array_to_binary(datatype, array)
    region, offset, size = shared_memory_range(shared_memory, name, parameters)
    if len(data) > size:
        raise InvalidArgument(
            f"shared memory size specified with the request for output '{name}' ({size} bytes) should be at "
            f"least {len(data)} bytes to hold the results"
        )
    region.write(offset, data, name)
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


def plain_json_body(response: InferenceResponse, request: InferenceRequest) -> bytes | None:
    """The usual answer, every output as JSON `data` and no parameters, written from pieces; None for any other.

    The bytes are those `encode_infer_response`'s document gives (same keys, same order, orjson's numbers). When the
    response's outputs are rows of a batch, each output of the whole batch is serialized once and every request of
    the batch takes its own rows' text (one orjson call per output and batch instead of a document per request).
    """
    if response.parameters or request.parameters.get("binary_data_output"):
        return None
    outputs = response.outputs
    requested = request.requested_outputs
    if requested is None:
        names = list(outputs)
    else:
        names = []
        for output in requested:
            if output.parameters:  # binary data, classification, shared memory: the general path
                return None
            if output.name in outputs:
                names.append(output.name)
    rows = response.rows
    entries = []
    for name in names:
        entry = _batch_rows_entry(name, *rows) if rows is not None else None
        if entry is None:
            entry = _plain_entry(name, outputs[name])
            if entry is None:
                return None
        entries.append(entry)
    request_id = response.id or request.id
    head = _document_head(response.model_name, response.model_version)
    if request_id:
        head += b',"id":' + orjson.dumps(request_id)
    return b"".join((head, b',"outputs":[', b",".join(entries), b"]}"))


@functools.lru_cache(maxsize=1024)
def _document_head(model_name: str, model_version: int) -> bytes:
    return b'{"model_name":' + orjson.dumps(model_name) + b',"model_version":' + orjson.dumps(str(model_version))


def _plain_entry(name: str, array: np.ndarray) -> bytes | None:
    """One output's JSON entry on its own, or None when it is not plain JSON."""
    array = np.asarray(array)
    datatype = wire_type_of(array)
    if datatype == "BYTES" or datatype in BINARY_ONLY_TYPES:
        return None
    try:
        data = orjson.dumps(np.ascontiguousarray(array).reshape(-1), option=_JSON_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    return _entry_head(name, datatype, array.shape) + data + b"}"


def _batch_rows_entry(name: str, batch: BatchOutputs, start: int, stop: int) -> bytes | None:
    """One output's JSON entry from rows `start:stop` of the batch's output, serialized once for the batch."""
    encoded = batch.encoded.get(name)
    if encoded is None:
        encoded = batch.encoded[name] = _encode_rows(batch.arrays.get(name))
    if encoded is _NOT_PLAIN:
        return None
    datatype, shape, rows = encoded
    count = stop - start
    key = (name, count)
    head = batch.encoded.get(key)
    if head is None:
        head = batch.encoded[key] = _entry_head(name, datatype, (count, *shape))
    if rows is None:
        return head + b"[]}"
    return b"".join((head, b"[", b",".join(rows[start:stop]), b"]}"))


def _encode_rows(array: np.ndarray | None) -> tuple[str, tuple[int, ...], list[bytes] | None] | object:
    """(datatype, shape after the batch dimension, each row's JSON numbers or None when rows are empty) of a whole
    batch output."""
    if array is None or array.ndim == 0:
        return _NOT_PLAIN
    datatype = wire_type_of(array)
    if datatype == "BYTES" or datatype in BINARY_ONLY_TYPES:
        return _NOT_PLAIN
    if not array.size:
        return datatype, array.shape[1:], None
    try:
        text = orjson.dumps(np.ascontiguousarray(array).reshape(len(array), -1), option=_JSON_OPTIONS)
    except orjson.JSONEncodeError:
        return _NOT_PLAIN
    # [[1,2],[3,4]]: numbers hold no brackets, so the rows are what lies between "],["
    return datatype, array.shape[1:], text[2:-2].split(b"],[")


def _entry_head(name: str, datatype: str, shape: tuple[int, ...]) -> bytes:
    return (
        b"".join(
            (b'{"name":', orjson.dumps(name), b',"datatype":"', datatype.encode(), b'","shape":', orjson.dumps(shape))
        )
        + b',"data":'
    )
