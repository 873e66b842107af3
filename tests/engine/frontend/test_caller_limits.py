"""Per-caller concurrency: one token (or user, or anonymous address) holds at most N requests in flight, on /v2
(429) and on gRPC (RESOURCE_EXHAUSTED), each refusal naming INFERA_MAX_CONCURRENT_PER_CALLER."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2_grpc

from engine.errors import Unauthorized
from engine.frontend import V2App
from engine.frontend.caller_limits import CallerLimits, TooManyInFlight, caller_key
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.admission import Principal
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings, read_engine_settings
from tests.engine.frontend.test_grpc_security import simple_request
from tests.engine.model_factory import make_simple_onnx

on_module_loop = pytest.mark.asyncio(loop_scope="module")
INFER_BODY = (
    b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [' + b",".join([b"1"] * 16) + b"]},"
    b' {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [' + b",".join([b"1"] * 16) + b"]}]}"
)
KEYS = {"Bearer one": 1, "Bearer two": 2}


def test_it_counts_each_caller_apart_and_forgets_idle_ones():
    limits = CallerLimits(2)
    alice, bob = caller_key(Principal("a", token_id=7, user_id=1), "ipv4:10.0.0.1"), ("anonymous", "10.0.0.2")
    assert alice == ("token", 7) and caller_key(Principal("u", user_id=3), None) == ("user", 3)
    assert caller_key(Principal("anonymous"), "10.0.0.2") == bob
    limits.enter(alice)
    limits.enter(alice)
    with pytest.raises(TooManyInFlight) as refused:
        limits.enter(alice)
    assert refused.value.status == 429 and "at most 2 at once (INFERA_MAX_CONCURRENT_PER_CALLER)" in str(refused.value)
    limits.enter(bob)  # another caller is not held back
    limits.leave(alice)
    limits.enter(alice)
    for key in (alice, alice, bob):
        limits.leave(key)
    assert limits.in_flight(alice) == limits.in_flight(bob) == 0 and not limits._in_flight
    unlimited = CallerLimits(0)
    for _ in range(1000):
        unlimited.enter(alice)


def test_it_reads_the_setting():
    assert read_engine_settings({}).max_concurrent_per_caller == 256
    assert read_engine_settings({"INFERA_MAX_CONCURRENT_PER_CALLER": "3"}).max_concurrent_per_caller == 3


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory):
    repo: Path = tmp_path_factory.mktemp("caller-limits")
    make_simple_onnx(repo, name="simple")
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings(max_concurrent_per_caller=1))
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def held_infer(engine: InferenceServer, monkeypatch: pytest.MonkeyPatch):
    """Inference that waits for `release` once `started` is set: a request kept in flight as long as a test likes."""
    started, release = asyncio.Event(), asyncio.Event()
    real_infer = engine.infer

    async def held(request, route=None):
        started.set()
        await release.wait()
        return await real_infer(request, route)

    monkeypatch.setattr(engine, "infer", held)
    yield started, release
    release.set()  # a failed test leaves nothing waiting


def scope_of(client: str, path: str, method: str = "POST") -> dict:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(b"content-type", b"application/json")],
        "client": (client, 5000),
        "server": ("127.0.0.1", 8000),
    }


async def answer_of(app: V2App, client: str, path: str, body: bytes = b"", method: str = "POST") -> tuple[int, bytes]:
    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    reply = await app.respond(scope_of(client, path, method), receive)
    return reply.status, reply.body


@on_module_loop
async def test_v2_refuses_a_callers_request_past_its_limit_with_429(engine, held_infer):
    started, release = held_infer
    app = V2App(engine)
    first = asyncio.ensure_future(answer_of(app, "10.0.0.1", "/v2/models/simple/infer", INFER_BODY))
    await started.wait()
    # refused at once (before the fix it waited with the first: wait_for ends that wait)
    status, body = await asyncio.wait_for(answer_of(app, "10.0.0.1", "/v2/models/simple/infer", INFER_BODY), 30)
    assert status == 429 and b"INFERA_MAX_CONCURRENT_PER_CALLER" in body
    assert (await answer_of(app, "10.0.0.2", "/v2/models/simple", method="GET"))[0] == 200  # another address
    assert (await answer_of(app, "10.0.0.1", "/v2/health/ready", method="GET"))[0] == 200  # health is not counted
    release.set()
    assert (await first)[0] == 200
    assert (await answer_of(app, "10.0.0.1", "/v2/models/simple/infer", INFER_BODY))[0] == 200


async def authenticate(scope: dict) -> Principal:
    for name, value in scope["headers"]:
        if name == b"authorization" and value.decode() in KEYS:
            token = KEYS[value.decode()]
            return Principal(f"user{token}", role="inference", user_id=token, token_id=token)
    raise Unauthorized("invalid API token")


@on_module_loop
async def test_grpc_refuses_a_tokens_call_past_its_limit_with_resource_exhausted(engine, held_infer):
    started, release = held_infer
    front_end = GrpcFrontEnd(engine, GrpcSettings(port=0, shutdown_grace_seconds=0), authenticate=authenticate)
    await front_end.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            one, two = (("authorization", "Bearer one"),), (("authorization", "Bearer two"),)
            first = asyncio.ensure_future(stub.ModelInfer(simple_request(), metadata=one))
            await started.wait()
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ModelInfer(simple_request(), metadata=one, timeout=30)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "INFERA_MAX_CONCURRENT_PER_CALLER" in refused.value.details()
            stream = stub.ModelStreamInfer(iter([simple_request()]), metadata=one)  # a stream's requests count too
            answer = await stream.read()
            assert "INFERA_MAX_CONCURRENT_PER_CALLER" in answer.error_message
            stream.cancel()
            other = asyncio.ensure_future(stub.ModelInfer(simple_request(), metadata=two))  # another token
            release.set()
            await asyncio.gather(first, other)
            await stub.ModelInfer(simple_request(), metadata=one)
            assert not front_end.caller_limits._in_flight
    finally:
        await front_end.stop(0)
