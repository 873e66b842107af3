"""Triton's gRPC inference messages and the engine's requests and responses, through the one decoder.

A ModelInferRequest becomes the same document an HTTP body parses into (inference_request.py): each input's
bytes from `raw_input_contents` go under RAW, its typed element lists under TYPED, and from there the checks and the
arrays are the HTTP ones. Responses carry every output in `raw_output_contents`, as Triton's own server does.
A request that mixes raw and typed contents, typed lists of another type, or contents with shared memory is refused
with Triton's words first (server src/grpc/infer_handler.cc), Infera's explanation after them.
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
# every list, in the order Triton reads them; each one's own datatype (int_contents and uint_contents also carry the
# 8- and 16-bit integers)
CONTENTS_TYPE = {
    "bool_contents": "BOOL",
    "int_contents": "INT32",
    "int64_contents": "INT64",
    "uint_contents": "UINT32",
    "uint64_contents": "UINT64",
    "fp32_contents": "FP32",
    "fp64_contents": "FP64",
    "bytes_contents": "BYTES",
}
CONTENTS_FIELDS = tuple(CONTENTS_TYPE)
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
    # as Triton: raw_input_contents hold, in order, the inputs that name no shared memory region
    in_message = [t for t in message.inputs if "shared_memory_region" not in t.parameters]
    if raw and len(raw) != len(in_message):
        explanation = (
            f"the request has {len(raw)} raw_input_contents for {len(in_message)} inputs outside shared memory: "
            "send one per such input, in the order of the inputs"
        )
        if len(raw) < len(in_message):
            explanation = f"{_no_data(in_message[len(raw)].name, model_name)} ({explanation})"
        raise InvalidArgument(explanation)
    inputs = []
    next_raw = 0
    for tensor in message.inputs:
        entry: dict[Any, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.shape),
            "parameters": parameters_of(tensor.parameters),
        }
        used = [field for field in CONTENTS_FIELDS if len(getattr(tensor.contents, field))]
        if "shared_memory_region" in entry["parameters"]:
            if used:
                raise InvalidArgument(
                    "unexpected 'content' provided when using shared memory for input tensor "
                    f"'{tensor.name}' for model '{model_name}': it also names a shared memory region"
                )
        elif raw:
            if used:
                raise InvalidArgument(
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{tensor.name}' for model '{model_name}': it also has '{used[0]}'"
                )
            entry[RAW] = memoryview(raw[next_raw])
            next_raw += 1
        else:
            entry[TYPED] = _typed_contents(tensor, used, model_name)
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


def _typed_contents(tensor: Any, used: list[str], model_name: str) -> tuple[str, Any]:
    """The one typed list of a tensor, checked as Triton checks it: of the tensor's datatype, and only one."""
    datatype = tensor.datatype
    wanted = CONTENTS_FIELD.get(datatype)
    if len(used) > 1:
        raise InvalidArgument(
            f"unexpected explicit tensor data for input tensor '{tensor.name}' for model '{model_name}', binary "
            f"data was already supplied. (it carries both '{used[0]}' and '{used[1]}')"
        )
    if used and used[0] != wanted:
        carried = CONTENTS_TYPE[used[0]]
        raise InvalidArgument(
            f"unexpected explicit tensor data for input tensor '{tensor.name}' for model '{model_name}' of type "
            f"'{carried}', expected datatype '{datatype}' (input '{tensor.name}' of datatype {datatype} carries "
            f"'{used[0]}'; it travels in " + (f"'{wanted}')" if wanted else "raw_input_contents only)")
        )
    if wanted is None and datatype in ("FP16", "BF16"):
        raise InvalidArgument(
            f"{_no_data(tensor.name, model_name)} (input '{tensor.name}' of datatype {datatype} must be sent in "
            "raw_input_contents)"
        )
    return (wanted or "contents"), (getattr(tensor.contents, wanted) if wanted else [])


def _no_data(tensor: str, model_name: str) -> str:
    return f"unable to find data for input tensor '{tensor}' for model '{model_name}' in request."


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
