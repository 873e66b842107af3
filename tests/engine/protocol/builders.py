"""Request bodies for the codec tests, built the way tritonclient and hand-written clients build them."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import tritonclient.http as httpclient
from tritonclient.http._utils import _get_inference_request


def client_body(
    inputs: list[tuple[str, np.ndarray, str, bool]], outputs: list[tuple[str, bool]] | None = None, **kwargs: Any
) -> tuple[bytes, int | None]:
    """Encode a request exactly as tritonclient does: (name, array, datatype, binary) per input."""
    infer_inputs = []
    for name, array, datatype, binary in inputs:
        infer_input = httpclient.InferInput(name, list(array.shape), datatype)
        infer_input.set_data_from_numpy(array, binary_data=binary)
        infer_inputs.append(infer_input)
    requested = [httpclient.InferRequestedOutput(n, binary_data=b) for n, b in outputs] if outputs else None
    body, header_length = _get_inference_request(
        inputs=infer_inputs,
        request_id=kwargs.pop("request_id", ""),
        outputs=requested,
        sequence_id=kwargs.pop("sequence_id", 0),
        sequence_start=kwargs.pop("sequence_start", False),
        sequence_end=kwargs.pop("sequence_end", False),
        priority=kwargs.pop("priority", 0),
        timeout=kwargs.pop("timeout", None),
        custom_parameters=kwargs.pop("parameters", None),
    )
    return body, header_length


def json_body(document: Any) -> bytes:
    """A JSON-only request body."""
    return orjson.dumps(document)


def simple_inputs(batch: int = 1) -> list[dict[str, Any]]:
    """JSON inputs for `simple` with batch `batch`."""
    return [
        {"name": "INPUT0", "datatype": "INT32", "shape": [batch, 16], "data": list(range(16 * batch))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [batch, 16], "data": [1] * 16 * batch},
    ]
