"""Attacks on the gRPC front end: big messages before authentication, corrupt messages, streams the client never
reads, health watchers; a token-mode server process measures what an unauthenticated message costs it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from engine.config.model_config import ModelConfig, TensorConfig
from engine.errors import Unauthorized
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings
from tests.engine.model_factory import make_simple_onnx, write_model_folder

pytestmark = pytest.mark.asyncio(loop_scope="module")

GOOD_KEY = "Bearer good-key"
BIG = 200 * 1024 * 1024  # far above the message limit, and above the RSS bound the tests allow
RSS_BOUND_KB = 64 * 1024
ROWS = 64 * 1024  # FP32 values per echoed tensor: 256 KiB answers fill a client's windows after a few
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"


def make_echo_onnx(repo: Path, name: str = "echo") -> None:
    """OUTPUT0 = INPUT0, FP32 of any length, unbatched: as large an answer as the request."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["n"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    config = ModelConfig(
        name=name,
        platform="onnxruntime_onnx",
        max_batch_size=0,
        input=[TensorConfig("INPUT0", "TYPE_FP32", [-1])],
        output=[TensorConfig("OUTPUT0", "TYPE_FP32", [-1])],
    )
    onnx.save(model, write_model_folder(repo, config, 1, "model.onnx"))


async def authenticate(scope: dict) -> object:
    """Token mode in miniature: one good key, everything else refused."""
    from engine.serving.admission import Principal

    for name, value in scope["headers"]:
        if name == b"authorization":
            if value.decode() == GOOD_KEY:
                return Principal("client", role="inference", user_id=1, token_id=1)
            raise Unauthorized("invalid API token")
    raise Unauthorized("this server requires an API token: send 'Authorization: Bearer <key>'")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def engine(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("grpc-security")
    make_simple_onnx(repo, name="simple")
    make_echo_onnx(repo)
    server = InferenceServer(repo, gpu_count=0, settings=EngineSettings(max_concurrent_per_caller=0))
    await server.start()
    yield server
    await server.stop()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def token_front_end(engine: InferenceServer):
    """A token-mode front end with small stream bounds and few health watchers."""
    settings = GrpcSettings(
        port=0,
        shutdown_grace_seconds=0,
        stream_concurrency=2,
        stream_queue_responses=4,
        max_health_watchers=12,
        max_health_watchers_per_peer=10,
    )
    front_end = GrpcFrontEnd(engine, settings, authenticate=authenticate)
    await front_end.start()
    yield front_end
    await front_end.stop()


def channel_of(front_end: GrpcFrontEnd) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"127.0.0.1:{front_end.port}")


def simple_request() -> service_pb2.ModelInferRequest:
    """A request for `simple`: two INT32 [1, 16] tensors of ones."""
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.ones(16, np.int32).tobytes())
    return request


def echo_request(request_id: str, rows: int = ROWS) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="echo", id=request_id)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[rows])
    request.raw_input_contents.append(np.ones(rows, np.float32).tobytes())
    return request


# ---- corrupt messages (Low: they answered UNKNOWN)


async def test_it_answers_a_corrupt_message_with_invalid_argument(token_front_end):
    metadata = (("authorization", GOOD_KEY),)
    async with channel_of(token_front_end) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as unary:
            await channel.unary_unary(INFER)(b"\xff\xff\xff", metadata=metadata)
        assert unary.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid ModelInferRequest message" in unary.value.details()
        stream = channel.stream_stream(STREAM)(iter([b"\x0a\xff\xff"]), metadata=metadata)
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in stream:
                pass
        assert streamed.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as health:
            await channel.unary_unary("/grpc.health.v1.Health/Check")(b"\xff\xff")
        assert health.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ---- ModelStreamInfer backpressure (Medium 8)


async def test_a_stream_whose_client_never_reads_stops_reading_its_requests(token_front_end, monkeypatch):
    engine = token_front_end.server
    started = 0
    real_infer = engine.infer

    async def counted(request, route=None):
        nonlocal started
        started += 1
        return await real_infer(request, route)

    monkeypatch.setattr(engine, "infer", counted)
    sent = 400
    written = 0
    async with channel_of(token_front_end) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(metadata=(("authorization", GOOD_KEY),))
        for number in range(sent):  # never reads an answer
            try:
                await asyncio.wait_for(call.write(echo_request(str(number))), timeout=3)
            except TimeoutError:
                break  # the server stopped reading: flow control holds the client's writes
            written += 1
        # the client's and the server's windows hold some requests and answers; the server holds at most
        # stream_concurrency running requests and stream_queue_responses answers
        assert written < sent, "the server read every request while none of its answers was read"
        assert started < 100
        call.cancel()


# ---- grpc.health.v1 (Low: unauthenticated, unbounded, polled per watcher)


async def test_a_models_health_needs_a_token_but_the_servers_does_not(token_front_end):
    async with channel_of(token_front_end) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert (await health.Check(health_pb2.HealthCheckRequest(service=""))).status == 1  # SERVING
        for name in ("simple", "no-such-model"):  # the same answer for both: no names revealed
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            watch = health.Watch(health_pb2.HealthCheckRequest(service=name))
            with pytest.raises(grpc.aio.AioRpcError) as watched:
                await watch.read()
            assert watched.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await health.Check(health_pb2.HealthCheckRequest(service=""), metadata=(("authorization", "Bearer bad"),))
        assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
        metadata = (("authorization", GOOD_KEY),)
        answer = await health.Check(health_pb2.HealthCheckRequest(service="simple"), metadata=metadata)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await health.Check(health_pb2.HealthCheckRequest(service="no-such-model"), metadata=metadata)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_health_watchers_are_capped_and_share_one_poll(token_front_end, monkeypatch):
    engine = token_front_end.server
    scans = 0
    polled = asyncio.Event()
    real_index = engine.repository_index

    def counted_index(*args, **kwargs):
        nonlocal scans
        scans += 1
        if scans >= 4:
            polled.set()
        return real_index(*args, **kwargs)

    monkeypatch.setattr(engine, "repository_index", counted_index)
    metadata = (("authorization", GOOD_KEY),)
    async with channel_of(token_front_end) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watches = [health.Watch(health_pb2.HealthCheckRequest(service="simple"), metadata=metadata) for _ in range(10)]
        for watch in watches:
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        extra = health.Watch(health_pb2.HealthCheckRequest(service=""))
        with pytest.raises(grpc.aio.AioRpcError) as capped:
            await extra.read()
        assert capped.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "INFERA_GRPC_MAX_HEALTH_WATCHERS_PER_PEER" in capped.value.details()
        await asyncio.wait_for(polled.wait(), timeout=30)
        # one scan for the first watcher, then one per poll for all ten (not one per watcher per poll)
        assert scans == 4
        for watch in watches:
            watch.cancel()


# ---- nothing big before authentication (High 2), in a server process whose memory is measured

SERVER_SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from engine.frontend.grpc_server import GrpcFrontEnd
    from engine.serving.server import InferenceServer
    from engine.settings import EngineSettings, GrpcSettings
    from tests.engine.frontend.test_grpc_security import authenticate

    async def main():
        server = InferenceServer(Path(sys.argv[1]), gpu_count=0, settings=EngineSettings())
        await server.start()
        front_end = GrpcFrontEnd(server, GrpcSettings(port=0), authenticate=authenticate)
        print(await front_end.start(), flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


def big_infer_request() -> bytes:
    """A well-formed ModelInferRequest for `simple` carrying BIG bytes of raw input (zeros: 200 KB gzipped)."""
    length, size = bytearray(), BIG
    while size > 0x7F:
        length.append(size & 0x7F | 0x80)
        size >>= 7
    length.append(size)
    return b"\x0a\x06simple" + b"\x3a" + bytes(length) + bytes(BIG)  # field 1 model_name, 7 raw_input_contents


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture(scope="module")
def token_server_process(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("grpc-process")
    make_simple_onnx(repo, name="simple")
    root = Path(__file__).resolve().parents[3]
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER_SCRIPT, str(repo)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        port = int(process.stdout.readline())
        yield process.pid, f"127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


@pytest.mark.server
@pytest.mark.parametrize("compression", [grpc.Compression.Gzip, grpc.Compression.NoCompression])
async def test_an_unauthenticated_big_message_is_refused_before_it_is_read(token_server_process, compression):
    pid, address = token_server_process
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        infer = channel.unary_unary(INFER)
        with pytest.raises(grpc.aio.AioRpcError) as warm:  # grpc's own first-call allocations, before measuring
            await infer(b"")
        assert warm.value.code() == grpc.StatusCode.UNAUTHENTICATED
        before = peak_rss_kb(pid)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await infer(big_infer_request(), compression=compression)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert peak_rss_kb(pid) - before < RSS_BOUND_KB


@pytest.mark.server
async def test_an_authenticated_gzip_bomb_inflates_no_further_than_the_message_limit(token_server_process):
    pid, address = token_server_process
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        before = peak_rss_kb(pid)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.unary_unary(INFER)(
                big_infer_request(), compression=grpc.Compression.Gzip, metadata=(("authorization", GOOD_KEY),)
            )
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # the limit is /v2's body limit (64 MB): grpc core stops inflating there, far short of the 200 MB
        assert peak_rss_kb(pid) - before < 2 * RSS_BOUND_KB
