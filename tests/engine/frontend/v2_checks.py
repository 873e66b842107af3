"""Requests and expectations shared by the tests that drive a real server process."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass

import numpy as np
import tritonclient.http as httpclient

from tests.engine.frontend.server_process import GUARD_SIZES
from tests.engine.model_factory import mlp_reference

GUARD_INPUT = np.linspace(-1, 1, 2 * GUARD_SIZES[0], dtype=np.float32).reshape(2, GUARD_SIZES[0])


@dataclass
class RawAnswer:
    """Status, headers and body of a request sent without tritonclient."""

    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> str:
        return json.loads(self.body)["error"]


def raw_request(
    url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> RawAnswer:
    """One request on a fresh connection, for what tritonclient cannot send (broken bodies, odd methods)."""
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return RawAnswer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def simple_inputs(a: np.ndarray, b: np.ndarray, binary: tuple[bool, bool] = (True, False)) -> list:
    """INPUT0 and INPUT1 of `simple`, each as binary or JSON."""
    inputs = []
    for name, array, as_binary in (("INPUT0", a, binary[0]), ("INPUT1", b, binary[1])):
        infer_input = httpclient.InferInput(name, list(array.shape), "INT32")
        infer_input.set_data_from_numpy(array, binary_data=as_binary)
        inputs.append(infer_input)
    return inputs


def guard_inputs() -> list:
    infer_input = httpclient.InferInput("INPUT0", list(GUARD_INPUT.shape), "FP32")
    infer_input.set_data_from_numpy(GUARD_INPUT)
    return [infer_input]


def check_guard_output(output: np.ndarray) -> None:
    """The guard MLP answered exactly what torch computes for GUARD_INPUT."""
    np.testing.assert_allclose(output, mlp_reference(GUARD_INPUT, GUARD_SIZES), rtol=1e-5, atol=1e-5)


def assert_guard_answers(url: str) -> None:
    """Another model still serves correctly (after a bad request)."""
    with httpclient.InferenceServerClient(url) as client:
        check_guard_output(client.infer("guard", guard_inputs()).as_numpy("OUTPUT0"))


def infer_json(inputs: list[dict], **extra) -> bytes:
    return json.dumps({"inputs": inputs, **extra}).encode()


def simple_json_inputs(batch: int = 1) -> list[dict]:
    return [
        {"name": "INPUT0", "datatype": "INT32", "shape": [batch, 16], "data": list(range(16 * batch))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [batch, 16], "data": [1] * (16 * batch)},
    ]
