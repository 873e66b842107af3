"""Triton's raw binary bodies and system shared memory, against the standalone server under uvicorn."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.engine.frontend.server_process import GUARD_SIZES
from tests.engine.frontend.v2_checks import GUARD_INPUT, assert_guard_answers, raw_request
from tests.engine.model_factory import mlp_reference

pytestmark = pytest.mark.server

RAW = {"Inference-Header-Content-Length": "0", "Content-Type": "application/octet-stream"}


def test_a_raw_body_is_the_one_inputs_bytes(uvicorn_server_url):
    row = GUARD_INPUT[:1]
    answer = raw_request(uvicorn_server_url, "POST", "/v2/models/guard/infer", row.tobytes(), RAW)
    assert answer.status == 200, answer.body
    header = answer.body[: int(answer.headers["inference-header-content-length"])]
    output = np.frombuffer(answer.body[len(header) :], dtype=np.float32).reshape(1, -1)
    np.testing.assert_allclose(output, mlp_reference(row, GUARD_SIZES), rtol=1e-5, atol=1e-5)


def test_a_raw_body_fills_the_one_variable_dimension(uvicorn_server_url):
    values = np.arange(6, dtype=np.float32)
    answer = raw_request(uvicorn_server_url, "POST", "/v2/models/one_wild/infer", values.tobytes(), RAW)
    assert answer.status == 200, answer.body
    assert b'"shape":[2,3]' in answer.body


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (
            "simple",
            np.zeros(16, np.int32).tobytes(),
            "Raw request must only have 1 input (found 1) to be deduced but got 2",
        ),
        ("two_wild", np.zeros(8, np.float32).tobytes(), "can not be deduced because there are more than one variable"),
        ("guard", np.zeros(7, np.float32).tobytes(), "needs 32"),
    ],
)
def test_it_refuses_what_a_raw_body_cannot_describe(uvicorn_server_url, model, body, message):
    answer = raw_request(uvicorn_server_url, "POST", f"/v2/models/{model}/infer", body, RAW)
    assert answer.status == 400 and message in answer.error()
    assert_guard_answers(uvicorn_server_url)


def test_a_raw_bytes_body_is_one_element(uvicorn_server_url):
    answer = raw_request(uvicorn_server_url, "POST", "/v2/models/bytes_echo/infer", b"hello raw", RAW)
    assert answer.status == 200, answer.body
    assert b"hello raw" in answer.body


def test_the_shared_memory_client_flow_for_int32(uvicorn_server_url):
    client = httpclient.InferenceServerClient(uvicorn_server_url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs_handle = shm.create_shared_memory_region("infera_inputs", "/infera_test_inputs", 128)
    outputs_handle = shm.create_shared_memory_region("infera_outputs", "/infera_test_outputs", 128)
    try:
        shm.set_shared_memory_region(inputs_handle, [a])
        shm.set_shared_memory_region(inputs_handle, [b], offset=64)
        client.register_system_shared_memory("infera_inputs", "/infera_test_inputs", 128)
        client.register_system_shared_memory("infera_outputs", "/infera_test_outputs", 128)
        names = {region["name"] for region in client.get_system_shared_memory_status()}
        assert names == {"infera_inputs", "infera_outputs"}
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_shared_memory("infera_inputs", 64)
        inputs[1].set_shared_memory("infera_inputs", 64, offset=64)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0"), httpclient.InferRequestedOutput("OUTPUT1")]
        outputs[0].set_shared_memory("infera_outputs", 64)
        outputs[1].set_shared_memory("infera_outputs", 64, offset=64)
        result = client.infer("simple", inputs, outputs=outputs)
        assert result.get_output("OUTPUT0")["parameters"]["shared_memory_byte_size"] == 64
        total = shm.get_contents_as_numpy(outputs_handle, np.int32, [1, 16])
        difference = shm.get_contents_as_numpy(outputs_handle, np.int32, [1, 16], offset=64)
        np.testing.assert_array_equal(total, a + b)
        np.testing.assert_array_equal(difference, a - b)

        too_small = [httpclient.InferRequestedOutput("OUTPUT0")]
        too_small[0].set_shared_memory("infera_outputs", 16)
        with pytest.raises(InferenceServerException, match="should be at least 64 bytes"):
            client.infer("simple", inputs, outputs=too_small)
        past_end = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), inputs[1]]
        past_end[0].set_shared_memory("infera_inputs", 64, offset=96)
        with pytest.raises(InferenceServerException, match="which holds 128 bytes"):
            client.infer("simple", past_end)
        with pytest.raises(InferenceServerException, match="already in manager"):
            client.register_system_shared_memory("infera_inputs", "/infera_test_inputs", 128)
        client.unregister_system_shared_memory("infera_inputs")
        assert [r["name"] for r in client.get_system_shared_memory_status()] == ["infera_outputs"]
        client.unregister_system_shared_memory()
        assert client.get_system_shared_memory_status() == []
    finally:
        shm.destroy_shared_memory_region(inputs_handle)
        shm.destroy_shared_memory_region(outputs_handle)
        client.close()


def test_the_shared_memory_client_flow_for_bytes(uvicorn_server_url):
    client = httpclient.InferenceServerClient(uvicorn_server_url)
    text = np.array([[str(i).encode() for i in range(16)]], dtype=object)
    serialized = serialize_byte_tensor(text)
    size = len(serialized.item())
    inputs_handle = shm.create_shared_memory_region("infera_strings", "/infera_test_strings", size * 2)
    outputs_handle = shm.create_shared_memory_region("infera_string_out", "/infera_test_string_out", 1024)
    try:
        shm.set_shared_memory_region(inputs_handle, [serialized])
        shm.set_shared_memory_region(inputs_handle, [serialized], offset=size)
        client.register_system_shared_memory("infera_strings", "/infera_test_strings", size * 2)
        client.register_system_shared_memory("infera_string_out", "/infera_test_string_out", 1024)
        inputs = [httpclient.InferInput("INPUT0", [1, 16], "BYTES"), httpclient.InferInput("INPUT1", [1, 16], "BYTES")]
        inputs[0].set_shared_memory("infera_strings", size)
        inputs[1].set_shared_memory("infera_strings", size, offset=size)
        output = httpclient.InferRequestedOutput("OUTPUT0")
        output.set_shared_memory("infera_string_out", 1024)
        result = client.infer("simple_string", inputs, outputs=[output])
        written = result.get_output("OUTPUT0")["parameters"]["shared_memory_byte_size"]
        doubled = shm.get_contents_as_numpy(outputs_handle, np.object_, [1, 16])
        assert written > 0 and doubled.reshape(-1).tolist() == [str(2 * i).encode() for i in range(16)]
    finally:
        client.unregister_system_shared_memory()
        shm.destroy_shared_memory_region(inputs_handle)
        shm.destroy_shared_memory_region(outputs_handle)
        client.close()


def test_an_unregistered_region_is_a_clear_400(uvicorn_server_url):
    client = httpclient.InferenceServerClient(uvicorn_server_url)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("nowhere", 64)
    inputs[1].set_data_from_numpy(np.zeros((1, 16), np.int32))
    with pytest.raises(InferenceServerException, match="'nowhere', which is not registered"):
        client.infer("simple", inputs)
    client.close()
