"""Decode a v2 infer request into an InferenceRequest: the one decoder behind every front end.

HTTP sends a JSON header with an optional binary section; gRPC sends a protobuf, which its codec
(grpc_codec.py) turns into the same document, with each input's bytes under RAW or its typed element lists under
TYPED (keys no JSON document can hold). From there one path checks and builds every request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from engine.config.datatypes import numpy_dtype
from engine.config.model_config import ModelConfig
from engine.errors import InvalidArgument
from engine.protocol.plain_json import plain_json_input, plain_request
from engine.protocol.tensors import array_from_binary, array_from_json, array_from_typed
from engine.protocol.validation import check_required_inputs, checked_batch, common_batch_size, input_specs
from engine.types import InferenceRequest, RequestedOutput

if TYPE_CHECKING:
    from engine.protocol.shared_memory import CallerRegions, Region

Body = bytes | bytearray | memoryview
# a request's parameters (as sent, unchecked) -> the config of the version it runs on: a router's choice, made once
# the body is parsed and before the request is checked against a config
ConfigChoice = Callable[[Any], ModelConfig]


class _Source:
    """A key of an input entry that only a codec in this package can set (JSON keys are always strings)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<input source {self.name}>"


_NO_PARAMETERS: dict[str, Any] = {}  # read only
_NO_BINARY = memoryview(b"")
RAW = _Source("raw")  # the input's little-endian bytes (gRPC raw_input_contents)
TYPED = _Source("typed")  # (contents field name, its elements) (gRPC InferTensorContents)


def decode_infer_request(
    body: Body,
    header_length: int | None,
    config: ModelConfig | ConfigChoice,
    *,
    model_name: str | None = None,
    model_version: int | None = None,
    shared_memory: CallerRegions | None = None,
) -> InferenceRequest:
    """Parse and validate one infer request for the model `config` describes (or, a ConfigChoice, for the version
    it chooses from the request's parameters once the body is parsed).

    `header_length` is the `Inference-Header-Content-Length` value: the JSON header is that many bytes,
    binary tensor data follows. Every problem raises InvalidArgument with the client's vocabulary.
    """
    if header_length is None:  # JSON alone, as most requests come
        document, binary = parse_json_object(body), _NO_BINARY
        config = chosen_config(config, document)
        request = plain_request(document, config, model_name or config.name, model_version)
        if request is not None:
            return request
    elif header_length == 0:
        config = chosen_config(config, None)  # a raw body has no parameters
        document, binary = raw_body_document(memoryview(body), config)
    else:
        header, binary = split_body(memoryview(body), header_length)
        document = parse_json_object(header)
        config = chosen_config(config, document)
    return request_from_document(
        document, binary, config, model_name=model_name, model_version=model_version, shared_memory=shared_memory
    )


def chosen_config(config: ModelConfig | ConfigChoice, document: dict[str, Any] | None) -> ModelConfig:
    """The config a request is checked against: `config`, or its choice from the parsed document's parameters."""
    if isinstance(config, ModelConfig):
        return config
    return config(document.get("parameters") if document is not None else None)


def raw_body_document(body: memoryview, config: ModelConfig) -> tuple[dict[str, Any], memoryview]:
    """Triton's raw binary request (`Inference-Header-Content-Length: 0`): the body is the one input's bytes.

    Allowed for a model with exactly one input; its shape is the config's, batch 1 for a batching model, with at
    most one variable dimension, deduced from the body's size. A BYTES input must have shape [1]: the body is that
    one element. Outputs come back as binary, as there is no JSON header to ask otherwise.
    """
    if len(config.input) != 1:
        raise InvalidArgument(
            f"Raw request must only have 1 input (found 1) to be deduced but got {len(config.input)} inputs in "
            f"'{config.name}' model configuration"
        )
    tensor = config.input[0]
    shape = [1] if config.max_batch_size > 0 else []
    wildcard = None
    elements = 1
    for dim in tensor.dims:
        if dim == -1:
            if wildcard is not None:
                raise InvalidArgument(
                    f"The shape of the raw input '{tensor.name}' can not be deduced because there are more than "
                    "one variable-sized dimension"
                )
            wildcard = len(shape)
        else:
            elements *= dim
        shape.append(dim)
    if tensor.datatype == "BYTES":
        if wildcard is not None or elements != 1:
            raise InvalidArgument("For BYTE datatype raw input, the model must have input shape [1]")
        prefix = len(body).to_bytes(4, "little")
        entry = {"name": tensor.name, "datatype": "BYTES", "shape": shape, RAW: memoryview(prefix + bytes(body))}
        return {"inputs": [entry], "parameters": {"binary_data_output": True}}, body[len(body) :]
    if wildcard is not None:
        itemsize = numpy_dtype(tensor.datatype).itemsize
        shape[wildcard] = len(body) // max(elements * itemsize, 1)
    entry = {"name": tensor.name, "datatype": tensor.datatype, "shape": shape, RAW: body}
    return {"inputs": [entry], "parameters": {"binary_data_output": True}}, body[len(body) :]


def request_from_document(
    document: dict[str, Any],
    binary: memoryview,
    config: ModelConfig,
    *,
    model_name: str | None = None,
    model_version: int | None = None,
    shared_memory: CallerRegions | None = None,
) -> InferenceRequest:
    """Check and build the request a parsed document describes, for the model `config` describes."""
    request = InferenceRequest(
        model_name=model_name or config.name,
        inputs={},
        model_version=model_version,
        id=_request_id(document.get("id", "")),
    )
    parameters = document.get("parameters")
    if parameters:  # most requests carry none
        _apply_request_parameters(request, _parameters(parameters, "request"))
    elif parameters is not None:
        _parameters(parameters, "request")
    request.inputs, request.batch_size = _decode_inputs(document.get("inputs"), binary, config, shared_memory)
    if "outputs" in document:
        request.requested_outputs = _requested_outputs(document["outputs"], config, shared_memory)
    return request


def split_body(view: memoryview, header_length: int | None) -> tuple[memoryview, memoryview]:
    """Split the body into the JSON header and the binary section."""
    if header_length is None:
        return view, view[len(view) :]
    if header_length < 0 or header_length > len(view):
        raise InvalidArgument(
            f"Inference-Header-Content-Length {header_length} is beyond the body of {len(view)} bytes"
        )
    return view[:header_length], view[header_length:]


def parse_header_length(value: str | bytes | None) -> int | None:
    """The `Inference-Header-Content-Length` header as a number (None when absent)."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if not text.strip().isdigit():
        raise InvalidArgument(f"Inference-Header-Content-Length '{text}' is not a byte count")
    return int(text)


def parse_json_object(raw: Body) -> dict[str, Any]:
    """Parse a JSON body that must be an object."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidArgument(f"malformed JSON in the request body: {exc}") from None
    if not isinstance(document, dict):
        raise InvalidArgument("the request body must be a JSON object")
    return document


def _request_id(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidArgument("request 'id' must be a string")
    return value


def _parameters(value: Any, owner: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"{owner} 'parameters' must be a JSON object")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _apply_request_parameters(request: InferenceRequest, parameters: dict[str, Any]) -> None:
    """Move Triton's reserved request parameters into fields; the rest pass through to the model."""
    rest = dict(parameters)
    if "sequence_id" in rest:
        value = rest.pop("sequence_id")
        if not (isinstance(value, str) or (_is_int(value) and value >= 0)):
            raise InvalidArgument("parameter 'sequence_id' must be a non-negative integer or a string")
        request.sequence_id = value
    for key in ("sequence_start", "sequence_end"):
        if key in rest:
            value = rest.pop(key)
            if not isinstance(value, bool):
                raise InvalidArgument(f"parameter '{key}' must be true or false")
            setattr(request, key, value)
    if "priority" in rest:
        value = rest.pop("priority")
        if not (_is_int(value) and value >= 0):
            raise InvalidArgument("parameter 'priority' must be a non-negative integer")
        request.priority = value
    if "timeout" in rest:
        value = rest.pop("timeout")
        if not (_is_int(value) and value >= 0):
            raise InvalidArgument("parameter 'timeout' must be a non-negative integer of microseconds")
        request.timeout_us = value
    if "binary_data_output" in rest and not isinstance(rest["binary_data_output"], bool):
        raise InvalidArgument("parameter 'binary_data_output' must be true or false")
    request.parameters = rest


def _decode_inputs(
    entries: Any, binary: memoryview, config: ModelConfig, shared_memory: CallerRegions | None
) -> tuple[dict[str, np.ndarray], int]:
    """Decode every input in request order, consuming the binary section as each one claims it."""
    if not isinstance(entries, list):
        raise InvalidArgument("the request must have an 'inputs' list")
    specs = input_specs(config)
    inputs: dict[str, np.ndarray] = {}
    batches: dict[str, int] = {}
    offset = 0
    for entry in entries:
        if type(entry) is dict and len(entry) == 4:  # name, datatype, shape and data, as clients send most inputs
            name = entry.get("name")
            spec = specs.get(name) if type(name) is str else None
            if spec is not None and spec.json is not None:
                plain = plain_json_input(entry, spec)
                if plain is not None and name not in inputs:
                    inputs[name], batches[name] = plain
                    continue
        name, datatype, shape, parameters = _input_header(entry)
        if name in inputs:
            raise InvalidArgument(f"input '{name}' already exists in request: it appears more than once in the request")
        spec = specs.get(name)
        if spec is None:
            raise InvalidArgument(f"unexpected inference input '{name}' for model '{config.name}'")
        batches[name] = checked_batch(spec, datatype, shape)
        if not parameters and "data" in entry and RAW not in entry and TYPED not in entry:
            inputs[name] = array_from_json(name, datatype, shape, entry["data"], config.name)  # the usual JSON input
            continue
        size = parameters.get("binary_data_size")
        if "shared_memory_region" in parameters:
            if "data" in entry or size is not None or RAW in entry or TYPED in entry:
                raise InvalidArgument(f"input '{name}' has both shared memory and data of its own")
            region, start, size = shared_memory_range(shared_memory, name, parameters)
            array = array_from_binary(name, datatype, shape, region.read(start, size, name), config.name)
        elif RAW in entry:
            array = array_from_binary(name, datatype, shape, entry[RAW], config.name)
        elif TYPED in entry:
            array = array_from_typed(name, datatype, shape, *entry[TYPED])
        elif size is not None:
            if "data" in entry:
                raise InvalidArgument(f"input '{name}' has both 'data' and 'binary_data_size'")
            if not (_is_int(size) and size >= 0):
                raise InvalidArgument(f"input '{name}' has a 'binary_data_size' that is not a byte count")
            if size > len(binary) - offset:
                raise InvalidArgument(
                    f"input '{name}' has binary_data_size {size} but only {len(binary) - offset} bytes "
                    "of binary data remain in the body"
                )
            array = array_from_binary(name, datatype, shape, binary[offset : offset + size], config.name)
            offset += size
        elif "data" in entry:
            array = array_from_json(name, datatype, shape, entry["data"], config.name)
        else:
            raise InvalidArgument(f"input '{name}' has neither 'data' nor 'binary_data_size'")
        inputs[name] = array  # in the config's dims; the backend applies any `reshape`
    if offset != len(binary):
        raise InvalidArgument(f"the body has {len(binary) - offset} bytes of binary data no input claims")
    if len(inputs) != len(specs):
        check_required_inputs(config, inputs)
    if config.max_batch_size <= 0:
        return inputs, 1
    sizes = set(batches.values())
    if len(sizes) == 1:
        return inputs, sizes.pop()
    return inputs, common_batch_size(config, batches)


def _input_header(entry: Any) -> tuple[str, str, list[int], dict[str, Any]]:
    """Name, datatype, shape and parameters of one `inputs` entry, type-checked."""
    if type(entry) is not dict:
        raise InvalidArgument("each entry of 'inputs' must be a JSON object")
    name = entry.get("name")
    if type(name) is not str:
        raise InvalidArgument("each input needs a 'name' string")
    datatype = entry.get("datatype")
    if type(datatype) is not str:
        raise InvalidArgument(f"input '{name}' needs a 'datatype' string")
    shape = entry.get("shape")
    if type(shape) is not list:
        raise InvalidArgument(f"input '{name}' needs a 'shape' list of non-negative integers")
    for d in shape:  # `type(d) is int` refuses booleans, which are ints to isinstance
        if type(d) is not int or d < 0:
            raise InvalidArgument(f"input '{name}' needs a 'shape' list of non-negative integers")
    parameters = entry.get("parameters")
    if parameters is None:
        return name, datatype, shape, _NO_PARAMETERS
    return name, datatype, shape, _parameters(parameters, f"input '{name}'")


def _requested_outputs(
    entries: Any, config: ModelConfig, shared_memory: CallerRegions | None = None
) -> list[RequestedOutput]:
    """The `outputs` list: known names, each at most once, with their parameters."""
    if not isinstance(entries, list):
        raise InvalidArgument("request 'outputs' must be a list")
    requested: list[RequestedOutput] = []
    seen: set[str] = set()
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise InvalidArgument("each entry of 'outputs' must be a JSON object with a 'name'")
        name = entry["name"]
        if config.output_named(name) is None:
            raise InvalidArgument(f"unexpected inference output '{name}' for model '{config.name}'")
        if name in seen:
            raise InvalidArgument(f"output '{name}' already exists in request: it is requested more than once")
        seen.add(name)
        parameters = _parameters(entry.get("parameters"), f"output '{name}'")
        if "binary_data" in parameters and not isinstance(parameters["binary_data"], bool):
            raise InvalidArgument(f"output '{name}' has a 'binary_data' parameter that is not true or false")
        if "classification" in parameters:
            _check_classification(name, parameters["classification"], config)
        if "shared_memory_region" in parameters:
            shared_memory_range(shared_memory, name, parameters)  # the region exists and the range fits it
        requested.append(RequestedOutput(name=name, parameters=parameters))
    return requested


def shared_memory_range(
    shared_memory: CallerRegions | None, name: str, parameters: dict[str, Any]
) -> tuple[Region, int, int]:
    """The caller's region, offset and byte size a tensor's `shared_memory_*` parameters name, checked to fit."""
    region = parameters.get("shared_memory_region")
    offset = parameters.get("shared_memory_offset", 0)
    size = parameters.get("shared_memory_byte_size")
    if not isinstance(region, str) or not (_is_int(offset) and offset >= 0) or not (_is_int(size) and size >= 0):
        raise InvalidArgument(
            f"tensor '{name}' needs 'shared_memory_region' (a name), 'shared_memory_byte_size' and optionally "
            "'shared_memory_offset' (non-negative integers)"
        )
    if shared_memory is None:
        raise InvalidArgument(f"tensor '{name}' uses shared memory, which this front end does not serve")
    found = shared_memory.get(region, name, size)
    found.check_range(offset, size, name)
    return found, offset, size


def _check_classification(name: str, count: Any, config: ModelConfig) -> None:
    """Triton's classification extension: a positive top-k of a numeric output."""
    if not (_is_int(count) and count > 0):
        raise InvalidArgument(f"output '{name}' has a 'classification' parameter that is not a positive integer")
    if config.output_named(name).datatype == "BYTES":
        raise InvalidArgument(f"output '{name}' of datatype BYTES cannot be classified")
