"""gRPC against the whole console in token mode: a revoked token ends its open stream, nothing big is read before
the token is checked, a model's health needs a token."""

from __future__ import annotations

import json
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.conftest import ServerProcess, manage_command, serve_process
from tests.engine.frontend.test_grpc_security import peak_rss_kb, simple_request
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

BIG = 200 * 1024 * 1024
RSS_BOUND_KB = 64 * 1024


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory):
    """A console that demands tokens, with `simple` registered; (server, admin key)."""
    var_dir = tmp_path_factory.mktemp("grpc-auth") / "var"
    make_simple_onnx(var_dir / "models", name="simple")
    env = {"INFERA_INFERENCE_AUTH": "token", "INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage = manage_command(var_dir, env)
        manage("import_repository", str(var_dir / "models"))
        yield server, manage("issue_token", "admin")


def api(server: ServerProcess, key: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        server.base_url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - the test's own server
        text = response.read()
        return response.status, json.loads(text) if text else {}


def wait_ready(channel: grpc.Channel, key: str) -> None:
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    for _ in range(1200):
        if stub.ModelReady(service_pb2.ModelReadyRequest(name="simple"), metadata=(("authorization", key),)).ready:
            return
        threading.Event().wait(0.05)  # polling a server process that loads on its own
    pytest.fail("model 'simple' never became ready")


def test_a_revoked_token_ends_its_open_stream(token_server):
    server, admin_key = token_server
    status, issued = api(server, admin_key, "POST", "/api/tokens/", {"name": "stream"})
    assert status == 201
    sent: queue.Queue = queue.Queue()

    def requests() -> Iterator[service_pb2.ModelInferRequest]:
        while (message := sent.get()) is not None:
            yield message

    with grpc.insecure_channel(server.grpc_address) as channel:
        wait_ready(channel, f"Bearer {admin_key}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        answers = stub.ModelStreamInfer(requests(), metadata=(("authorization", f"Bearer {issued['key']}"),))
        try:
            sent.put(simple_request())
            first = next(answers)
            assert not first.error_message and first.infer_response.model_name == "simple"
            assert api(server, admin_key, "DELETE", f"/api/tokens/{issued['id']}/")[0] == 204
            sent.put(simple_request())
            with pytest.raises(grpc.RpcError) as ended:
                next(answers)
            assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            sent.put(None)
            answers.cancel()


@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.NoCompression])
def test_an_unauthenticated_big_message_costs_the_server_nothing(token_server, compression):
    server, _ = token_server
    message = simple_request()
    message.raw_input_contents[0] = bytes(BIG)
    payload = message.SerializeToString()
    with grpc.insecure_channel(server.grpc_address, options=[("grpc.max_send_message_length", -1)]) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as warm:
            infer(b"")
        assert warm.value.code() == grpc.StatusCode.UNAUTHENTICATED
        before = peak_rss_kb(server.process.pid)
        with pytest.raises(grpc.RpcError) as refused:
            infer(payload, compression=compression)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert peak_rss_kb(server.process.pid) - before < RSS_BOUND_KB


def test_a_models_health_needs_a_token(token_server):
    server, admin_key = token_server
    with grpc.insecure_channel(server.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(service="")).status == health_pb2.HealthCheckResponse.SERVING
        for name in ("simple", "no-such-model"):
            with pytest.raises(grpc.RpcError) as refused:
                health.Check(health_pb2.HealthCheckRequest(service=name))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        wait_ready(channel, f"Bearer {admin_key}")
        answer = health.Check(
            health_pb2.HealthCheckRequest(service="simple"), metadata=(("authorization", f"Bearer {admin_key}"),)
        )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_a_models_readiness_needs_a_token_over_grpc_as_over_http(token_server):
    # ModelReady answered anyone which model names exist and serve, where /v2/models/<m>/ready needs a token
    server, admin_key = token_server
    with grpc.insecure_channel(server.grpc_address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(service_pb2.ServerLiveRequest()).live
        for name in ("simple", "no-such-model"):
            with pytest.raises(grpc.RpcError) as refused:
                stub.ModelReady(service_pb2.ModelReadyRequest(name=name))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(urllib.error.HTTPError) as http_refused:
        urllib.request.urlopen(server.base_url + "/v2/models/simple/ready", timeout=30)  # noqa: S310
    assert http_refused.value.code == 401
