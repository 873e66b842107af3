"""Triton's gRPC inference messages and the engine's requests and responses, through the one decoder.

A ModelInferRequest becomes the same document an HTTP body parses into (inference_request.py): each input's
bytes from `raw_input_contents` go under RAW, its typed element lists under TYPED, and from there the checks and the
arrays are the HTTP ones. Responses carry every output in `raw_output_contents`, as Triton's own server does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from engine.config.datatypes import wire_type_of
from engine.config.model_config import ModelConfig
from engine.errors import InvalidArgument
from engine.protocol.inference_request import RAW, TYPED, request_from_document
from engine.protocol.inference_response import place_in_shared_memory, selected_outputs
from engine.protocol.tensors import array_to_binary
from engine.types import InferenceRequest, InferenceResponse

if TYPE_CHECKING:
    from engine.protocol.shared_memory import CallerRegions

# the one InferTensorContents list each datatype travels in; FP16 and BF16 have none (raw contents only)
CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
CONTENTS_FIELDS = tuple(sorted(set(CONTENTS_FIELD.values())))
_INT64_MAX = 2**63 - 1
_EMPTY = memoryview(b"")


def parameter_value(parameter: Any) -> Any:
    """The value an InferParameter (or ModelRepositoryParameter) holds, None when it holds none."""
    which = parameter.WhichOneof("parameter_choice")
    return getattr(parameter, which) if which else None


def parameters_of(mapping: Any) -> dict[str, Any]:
    return {key: parameter_value(value) for key, value in mapping.items()}


def set_parameter(target: Any, value: Any) -> None:
    """Fill an InferParameter from a Python value (bool, int, float or str)."""
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int | np.integer):
        if int(value) > _INT64_MAX:
            target.uint64_param = int(value)
        else:
            target.int64_param = int(value)
    elif isinstance(value, float | np.floating):
        target.double_param = float(value)
    else:
        target.string_param = str(value)


def decode_grpc_request(
    message: Any,
    config: ModelConfig,
    *,
    model_name: str,
    model_version: int | None,
    shared_memory: CallerRegions | None = None,
) -> InferenceRequest:
    """The InferenceRequest a ModelInferRequest describes, checked against the served version's config."""
    raw = message.raw_input_contents
    if raw and len(raw) != len(message.inputs):
        raise InvalidArgument(
            f"the request has {len(raw)} raw_input_contents for {len(message.inputs)} inputs: "
            "send one per input, in the order of the inputs"
        )
    inputs = []
    for index, tensor in enumerate(message.inputs):
        entry: dict[Any, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
            "parameters": parameters_of(tensor.parameters),
        }
        used = [field for field in CONTENTS_FIELDS if len(getattr(tensor.contents, field))]
        if raw:
            if used:
                raise InvalidArgument(f"input '{tensor.name}' has both raw_input_contents and '{used[0]}'")
            entry[RAW] = memoryview(raw[index])
        elif "shared_memory_region" not in entry["parameters"] or used:
            entry[TYPED] = _typed_contents(tensor, used)
        inputs.append(entry)
    document: dict[str, Any] = {
        "id": message.id,
        "parameters": parameters_of(message.parameters),
        "inputs": inputs,
    }
    if message.outputs:
        document["outputs"] = [
            {"name": output.name, "parameters": parameters_of(output.parameters)} for output in message.outputs
        ]
    return request_from_document(
        document, _EMPTY, config, model_name=model_name, model_version=model_version, shared_memory=shared_memory
    )


def _typed_contents(tensor: Any, used: list[str]) -> tuple[str, Any]:
    wanted = CONTENTS_FIELD.get(tensor.datatype)
    if wanted is None and tensor.datatype in ("FP16", "BF16"):
        raise InvalidArgument(f"input '{tensor.name}' of datatype {tensor.datatype} must be sent in raw_input_contents")
    wrong = [field for field in used if field != wanted]
    if wrong and wanted is not None:
        raise InvalidArgument(
            f"input '{tensor.name}' of datatype {tensor.datatype} carries '{wrong[0]}'; it travels in '{wanted}'"
        )
    return (wanted or "contents"), (getattr(tensor.contents, wanted) if wanted else [])


def encode_grpc_response(
    response: InferenceResponse,
    request: InferenceRequest,
    response_class: type,
    *,
    batched: bool,
    shared_memory: CallerRegions | None = None,
) -> Any:
    """A ModelInferResponse with the outputs the request asked for (all of them when it named none), raw."""
    message = response_class(
        model_name=response.model_name, model_version=str(response.model_version), id=response.id or request.id
    )
    for key, value in response.parameters.items():
        set_parameter(message.parameters[key], value)
    for name, array, _, parameters in selected_outputs(response, request, False, batched):
        if "shared_memory_region" in parameters:
            placed = place_in_shared_memory(name, array, parameters, shared_memory)
            tensor = message.outputs.add(name=name, datatype=placed["datatype"], shape=placed["shape"])
            for key, value in placed["parameters"].items():
                set_parameter(tensor.parameters[key], value)
            message.raw_output_contents.append(b"")  # raw contents stay aligned with the outputs
            continue
        array = np.asarray(array)
        datatype = wire_type_of(array)
        message.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
        message.raw_output_contents.append(array_to_binary(datatype, array))
    return message
