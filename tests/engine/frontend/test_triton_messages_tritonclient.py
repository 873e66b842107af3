"""Refusals that Triton words in its own way start with Triton's exact text (Infera's explanation may follow), so
tools that match Triton's messages work: through a real server with tritonclient, HTTP and gRPC (issue 36, item 8).

The texts come from Triton's sources: server src/grpc/infer_handler.cc (raw and typed contents), core
src/infer_request.cc (duplicate outputs, BYTES element counts), server src/shared_memory_manager.cc (offsets and
sizes), server src/http_server.cc (JSON nesting) and core model_repository_manager.cc (model names).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.server_process import Served, client_region, make_identity, running_with_grpc
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

BOTH = pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
VALUES = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("triton-messages")
    make_simple_onnx(repo, name="simple")
    make_identity(repo, "bytes_echo", "TYPE_STRING", [1], 8)
    log = tmp_path_factory.mktemp("triton-messages-logs") / "uvicorn.log"
    with running_with_grpc(repo, log, {"INFERA_ALLOW_CLIENT_SHM": "true"}) as served:
        yield served


@pytest.fixture
def region() -> Iterator[tuple[str, object]]:
    """A fresh 64-byte shared memory object holding VALUES' first 16 numbers: (its key, tritonclient's handle)."""
    with client_region(64) as (key, handle):
        shm.set_shared_memory_region(handle, [VALUES])
        yield key, handle


def refusal(call) -> str:
    with pytest.raises(InferenceServerException) as refused:
        call()
    return refused.value.message()


def simple_inputs(module) -> list:
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(VALUES)
    return inputs


def test_grpc_raw_and_typed_contents_together_are_refused_with_tritons_words(served: Served) -> None:
    with grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            request.raw_input_contents.append(VALUES.tobytes())
        request.inputs[0].contents.int_contents.extend(VALUES.reshape(-1).tolist())
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith(
        "contents field must not be specified when using raw_input_contents for 'INPUT0' for model 'simple'"
    )


def test_grpc_typed_contents_of_another_type_are_refused_with_tritons_words(served: Served) -> None:
    with grpc.insecure_channel(served.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="simple")
        request.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16]).contents.fp32_contents.extend([0.0] * 16)
        request.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]).contents.int_contents.extend([0] * 16)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ModelInfer(request)
    assert refused.value.details().startswith(
        "unexpected explicit tensor data for input tensor 'INPUT0' for model 'simple' of type 'FP32', expected "
        "datatype 'INT32'"
    )


@BOTH
def test_an_output_named_twice_is_refused_with_tritons_words(served: Served, module) -> None:
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT0")]
    message = refusal(lambda: served.client(module).infer("simple", simple_inputs(module), outputs=outputs))
    assert message.startswith("output 'OUTPUT0' already exists in request")


@BOTH
def test_too_many_bytes_elements_are_refused_with_tritons_words(served: Served, module) -> None:
    given = module.InferInput("INPUT0", [1, 2], "BYTES")
    given.set_data_from_numpy(np.array([[b"a", b"b"]], dtype=object))
    given.set_shape([1, 1])  # as Triton's own test does: the data holds one element more than the shape
    message = refusal(lambda: served.client(module).infer("bytes_echo", [given]))
    assert message.startswith(
        "unexpected number of string elements 2 for inference input 'INPUT0' for model 'bytes_echo', expecting 1"
    )


@BOTH
def test_shared_memory_past_a_regions_end_is_refused_with_tritons_words(served: Served, region, module) -> None:
    key, _ = region
    client = served.client(module)
    name = f"bounds_{module.__name__.rsplit('.', 1)[-1]}"
    client.register_system_shared_memory(name, key, 64)
    try:
        for offset, byte_size, text in (
            (32, 64, f"Invalid offset + byte size for shared memory region: '{name}'"),
            (64, 64, f"Invalid offset for shared memory region: '{name}'"),
        ):
            inputs = simple_inputs(module)
            inputs[0].set_shared_memory(name, byte_size, offset=offset)
            assert refusal(lambda inputs=inputs: client.infer("simple", inputs)).startswith(text)
    finally:
        client.unregister_system_shared_memory(name)


@BOTH
def test_an_input_larger_than_its_shape_is_refused_with_tritons_words(served: Served, module) -> None:
    """As Triton's QA test_too_big_shm finds it: a 128-byte shared memory input for a [1, 16] INT32 one."""
    client = served.client(module)
    name = f"larger_{module.__name__.rsplit('.', 1)[-1]}"
    with client_region(128) as (key, _):
        client.register_system_shared_memory(name, key, 128)
        try:
            inputs = simple_inputs(module)
            inputs[1].set_shared_memory(name, 128)
            message = refusal(lambda: client.infer("simple", inputs))
        finally:
            client.unregister_system_shared_memory(name)
    assert message.startswith("input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 128")


@BOTH
def test_a_key_of_slashes_only_is_refused_with_tritons_words(served: Served, module) -> None:
    client = served.client(module)
    for key in ("/", "///"):  # Triton's QA test_register_invalid_shm_key
        message = refusal(lambda key=key: client.register_system_shared_memory("slashes", key, 64))
        assert message.startswith(f"cannot register shared memory region 'slashes' - invalid shm key '{key}'")


@BOTH
def test_an_input_in_shared_memory_beside_one_in_the_message_is_served(served: Served, region, module) -> None:
    """tritonclient's gRPC sends raw_input_contents only for the inputs outside shared memory (as Triton reads
    them); they were once counted against every input and refused."""
    key, _ = region
    client = served.client(module)
    name = f"beside_{module.__name__.rsplit('.', 1)[-1]}"
    client.register_system_shared_memory(name, key, 64)
    try:
        inputs = simple_inputs(module)
        inputs[0].set_shared_memory(name, 64)
        result = client.infer("simple", inputs)
    finally:
        client.unregister_system_shared_memory(name)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), VALUES * 2)


@BOTH
def test_a_region_larger_than_its_object_is_refused_with_tritons_words(served: Served, region, module) -> None:
    key, _ = region
    client = served.client(module)
    message = refusal(lambda: client.register_system_shared_memory("too_big", key, 128))
    assert message.startswith("failed to register shared memory region 'too_big': invalid args")
    message = refusal(lambda: client.register_system_shared_memory("too_far", key, 64, offset=8))
    assert message.startswith("failed to register shared memory region 'too_far': invalid args")


@BOTH
def test_model_names_with_a_path_or_no_name_are_refused_with_tritons_words(served: Served, module) -> None:
    client = served.client(module)
    assert refusal(lambda: client.load_model(" ")).startswith(
        "Model name cannot be empty. Please enter a valid name to deploy."
    )
    if module is grpcclient:  # an HTTP path cannot carry a '/' inside the model's name
        assert refusal(lambda: client.unload_model("a/b")).startswith(
            "invalid model name 'a/b', model name must not contain path traversal characters"
        )


def test_json_data_nested_past_tritons_limit_is_refused_with_tritons_words(served: Served) -> None:
    data: list = [1]
    for _ in range(101):
        data = [data]
    body = {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": data}]}
    host, port = served.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/v2/models/simple/infer", json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        error = json.loads(answer.read())["error"]
    finally:
        connection.close()
    assert answer.status == 400
    assert error.startswith("JSON nesting depth exceeds maximum allowed limit (100)")
