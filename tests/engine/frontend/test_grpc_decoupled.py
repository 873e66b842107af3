"""gRPC ModelStreamInfer with decoupled models, through tritonclient's own streaming API: every response as it is
sent, marked final or not, errors in the stream, and the stream's requests cancelled when the client leaves."""

from __future__ import annotations

import json
import queue
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.engine.decoupled_models import build_decoupled_repository
from tests.engine.frontend.server_process import free_port, running_server
from tests.engine.model_factory import make_simple_onnx


@pytest.fixture(scope="module")
def addresses(tmp_path_factory):
    repo = build_decoupled_repository(tmp_path_factory.mktemp("grpc-decoupled"))
    make_simple_onnx(repo, "simple")
    log = tmp_path_factory.mktemp("grpc-decoupled-logs") / "uvicorn.log"
    grpc_port = free_port()
    with running_server("uvicorn", repo, log, {"INFERA_GRPC_PORT": str(grpc_port)}) as http_address:
        yield http_address, f"127.0.0.1:{grpc_port}"


def repeat_inputs(values: list[int]) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [len(values)], "INT32")
    tensor.set_data_from_numpy(np.array(values, dtype=np.int32))
    return [tensor]


def stream_of(address: str, model: str, values: list[int], **parameters) -> list:
    """Every callback the stream delivers until the final response (results and errors, in order)."""
    received: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(address)
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    try:
        client.async_stream_infer(
            model,
            repeat_inputs(values),
            request_id="r1",
            parameters=parameters,
            enable_empty_final_response=True,
        )
        items = []
        while True:
            result, error = received.get(timeout=30)
            items.append((result, error))
            if error is not None:
                return items
            if result.get_response().parameters["triton_final_response"].bool_param:
                return items
    finally:
        client.stop_stream()
        client.close()


@pytest.mark.parametrize("model", ["repeat", "repeat_in_process"])
@pytest.mark.parametrize("count", [0, 1, 5])
def test_it_streams_every_response_of_a_decoupled_model(addresses, model, count):
    values = list(range(100, 100 + count))
    items = stream_of(addresses[1], model, values)
    answered, final = items[:-1], items[-1][0]
    assert [int(result.as_numpy("OUT")[0]) for result, _ in answered] == values
    assert all(not r.get_response().parameters["triton_final_response"].bool_param for r, _ in answered)
    assert final.get_response().id == "r1" and final.get_response().outputs == []  # the empty final, asked for


def test_an_error_response_reaches_the_stream(addresses):
    items = stream_of(addresses[1], "repeat", [1, 2, 3], fail_at=2)
    assert [int(result.as_numpy("OUT")[0]) for result, error in items if error is None] == [1, 2]
    assert "element 2 failed on purpose" in str(items[-1][1])


def test_model_infer_refuses_a_decoupled_model(addresses):
    client = grpcclient.InferenceServerClient(addresses[1])
    with pytest.raises(grpcclient.InferenceServerException, match="decoupled") as refused:
        client.infer("repeat", repeat_inputs([1]))
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    client.close()


def test_a_client_that_stops_its_stream_cancels_the_request(addresses):
    client = grpcclient.InferenceServerClient(addresses[1])
    received: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: received.put((result, error)))
    client.async_stream_infer("repeat", repeat_inputs([3]), parameters={"until_cancelled": True})
    result, error = received.get(timeout=30)
    assert error is None and int(result.as_numpy("OUT")[0]) == 3
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"http://{addresses[0]}/v2/models/repeat/stats", timeout=10) as answer:
            streams = json.loads(answer.read())["model_stats"][0]["stream_stats"]
        if streams["cancelled"] >= 1 and streams["in_flight"] == 0:
            break
        assert time.monotonic() < deadline, streams
        time.sleep(0.05)
