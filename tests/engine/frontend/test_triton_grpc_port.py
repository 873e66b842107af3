"""A gRPC port another process listens on is refused at start, as Triton's bind fails (issue 36's outside check).

grpc binds with SO_REUSEPORT, so a second server on 8001 used to start and take part of the calls: Triton's example
clients, run against one server, were answered "unknown model" by another's engine now and then.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import pytest_asyncio
import tritonclient.grpc.aio as aioclient

from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.server import InferenceServer
from engine.settings import GrpcSettings
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory):
    repo: Path = tmp_path_factory.mktemp("grpc-port")
    make_simple_onnx(repo, name="simple")
    server = InferenceServer(repo, gpu_count=0)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def taken_port():
    """A port another process's socket listens on, shared as grpc shares it (SO_REUSEPORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


async def test_it_refuses_to_start_on_a_port_another_process_listens_on(server, taken_port):
    front_end = GrpcFrontEnd(server, GrpcSettings(port=taken_port, shutdown_grace_seconds=1))
    with pytest.raises(OSError, match=f"gRPC port 127.0.0.1:{taken_port} is in use by another process"):
        await front_end.start()
    assert front_end.port is None


async def test_it_answers_every_call_when_a_second_server_tries_its_port(server):
    first = GrpcFrontEnd(server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    port = await first.start()
    try:
        with pytest.raises(OSError, match="in use by another process"):
            await GrpcFrontEnd(server, GrpcSettings(port=port, shutdown_grace_seconds=1)).start()
        client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            for _ in range(8):
                assert await client.is_model_ready("simple")
        finally:
            await client.close()
    finally:
        await first.stop()


async def test_the_workers_of_one_serve_share_the_port(server, taken_port):
    front_end = GrpcFrontEnd(server, GrpcSettings(port=taken_port, port_shared=True, shutdown_grace_seconds=1))
    assert await front_end.start() == taken_port
    await front_end.stop()
