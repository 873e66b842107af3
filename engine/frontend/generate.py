"""Triton's generate extension: `POST .../generate` (one JSON answer) and `.../generate_stream` (server-sent events).

A generate request is a flat JSON object. A key named like one of the model's inputs becomes that tensor (a scalar
or a one-dimensional list, shaped as Triton does: fixed dimensions first, the innermost variable one takes what is
left, other variable ones 1); "parameters" holds request parameters, and any other key becomes a parameter too;
"id" is the request id. An answer is one JSON object: id, model_name, model_version and each output by name (a
single element as a scalar, BYTES as text). A stream sends one `data: {...}` event per response of the model;
an error becomes a `data: {"error": ...}` event that ends it. The stream's status is its first response's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from engine.config.model_config import ModelConfig
from engine.errors import BackendError, InferaError, InvalidArgument
from engine.protocol import parse_json_object
from engine.protocol.inference_request import ConfigChoice, request_from_document
from engine.serving.streams import ResponseStream, StreamedResponse
from engine.types import InferenceRequest

EVENT_STREAM = b"text/event-stream; charset=utf-8"
JSON = b"application/json"
ONE_RESPONSE = (
    "generate expects model to produce exactly 1 response, use generate stream for model that generates various "
    "number of responses"
)


@dataclass(slots=True)
class StreamReply:
    """An answer sent as it is made: the status and first chunk, then `chunks` until they end; `cancel` when the
    client goes away first."""

    status: int
    content_type: bytes
    first: bytes
    chunks: AsyncIterator[bytes]
    cancel: Any
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def generate_request(
    body: bytes, config: ModelConfig | ConfigChoice, model: str, version: int | None, max_body_bytes: int
) -> InferenceRequest:
    """The inference request a generate body describes, checked against the model as /infer checks its own (a
    ConfigChoice chooses the version's config from the body's parameters, its top-level keys among them)."""
    generate = parse_json_object(body)
    if not isinstance(config, ModelConfig):
        config = config(_routing_parameters(generate))
    inputs: list[dict[str, Any]] = []
    parameters: dict[str, Any] = {}
    document: dict[str, Any] = {"inputs": inputs, "parameters": parameters}
    for key, value in generate.items():
        if key == "id":
            document["id"] = value
        elif key == "parameters":
            if not isinstance(value, dict):
                raise InvalidArgument("Expected JSON object for keyword: 'parameters'")
            for name, parameter in value.items():
                parameters[name] = _parameter(name, parameter)
        elif (tensor := config.input_named(key)) is not None:
            data = value if isinstance(value, list) else [value]
            shape = _shape(key, ([-1] if config.max_batch_size > 0 else []) + list(tensor.dims), len(data))
            inputs.append({"name": key, "datatype": tensor.datatype, "shape": shape, "data": data})
        else:
            parameters[key] = _parameter(key, value)
    return request_from_document(document, memoryview(b""), config, model_name=model, model_version=version)


def _routing_parameters(generate: dict[str, Any]) -> dict[str, Any]:
    """The parameters a generate body may carry, before its config says which keys are inputs."""
    parameters = {key: value for key, value in generate.items() if key not in ("id", "parameters")}
    given = generate.get("parameters")
    if isinstance(given, dict):
        parameters.update(given)
    return parameters


def _parameter(name: str, value: Any) -> Any:
    if isinstance(value, (str, bool, int, float)):
        return value
    raise InvalidArgument(f"parameter '{name}' must be a string, a number or a boolean, got {type(value).__name__}")


def _shape(name: str, dims: list[int], count: int) -> list[int]:
    """Triton's shape for `count` elements: fixed dimensions divide them, the innermost variable one takes the
    rest, any other variable one is 1."""
    shape = list(dims)
    left = count
    for dim in shape:
        if dim != -1:
            if dim == 0 or left % dim:
                raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
            left //= dim
    for index in range(len(shape) - 1, -1, -1):
        if shape[index] == -1:
            shape[index] = left
            left = 1
    if left != 1:
        raise InvalidArgument(f"The schema can not convert input '{name}' to tensor with proper shape")
    return shape


def response_object(
    model: str,
    version: int,
    request_id: str,
    outputs: dict[str, np.ndarray],
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One generate answer: id (when given), model_name, model_version, the response's parameters (Triton puts
    them beside the outputs: an ensemble's sequence_start, ...), then each output by name."""
    answer: dict[str, Any] = {"id": request_id} if request_id else {}
    answer |= {"model_name": model, "model_version": str(version)}
    answer |= parameters or {}
    for name, array in outputs.items():
        values = [_json_value(item) for item in np.asarray(array).reshape(-1)]
        answer[name] = values[0] if len(values) == 1 else values
    return answer


def _json_value(item: Any) -> Any:
    if isinstance(item, bytes):
        return item.decode("utf-8", errors="replace")
    return item.item() if isinstance(item, np.generic) else item


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def error_object(error: InferaError | str) -> dict[str, str]:
    return {"error": error.message if isinstance(error, InferaError) else error}


async def answer_once(stream: ResponseStream, model: str, request: InferenceRequest) -> bytes:
    """The one JSON answer of `/generate`: exactly one response, or the error that ended the stream."""
    answered: list[StreamedResponse] = []
    async for response in stream:
        if response.error is not None:
            raise response.error
        if not response.empty:
            answered.append(response)
    if len(answered) != 1:
        raise BackendError(ONE_RESPONSE)
    return orjson.dumps(
        response_object(model, stream.model_version, request.id, answered[0].outputs or {}, answered[0].parameters)
    )


async def stream_reply(stream: ResponseStream, model: str, request: InferenceRequest) -> StreamReply:
    """`/generate_stream`'s answer; waits for the first response, whose outcome sets the status."""
    responses = aiter(stream)

    def event(response: StreamedResponse) -> bytes:
        if response.error is not None:
            return sse_event(error_object(response.error))
        answer = response_object(model, stream.model_version, request.id, response.outputs or {}, response.parameters)
        return sse_event(answer)

    first = await anext(responses)
    while first.empty and not first.final:
        first = await anext(responses)
    status = first.error.status if first.error is not None else 200

    async def rest() -> AsyncIterator[bytes]:
        if first.final:
            return
        async for response in responses:
            if not response.empty:
                yield event(response)

    return StreamReply(status, EVENT_STREAM, b"" if first.empty else event(first), rest(), stream.cancel)
