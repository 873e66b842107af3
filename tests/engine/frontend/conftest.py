"""An engine over a small real repository, served in process by V2App."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.frontend import V2App
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, SharedMemoryLimits
from tests.engine.model_factory import make_simple_onnx

TINY_QUEUE = "dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
APP_BODY_LIMIT = 64 * 1024


@pytest.fixture
def v2_repository(tmp_path: Path) -> Path:
    """`simple` and `tiny_queue` (simple with a queue of one request)."""
    make_simple_onnx(tmp_path, name="simple")
    make_simple_onnx(tmp_path, name="tiny_queue", extra_config=TINY_QUEUE)
    return tmp_path


@pytest.fixture
async def v2_server(v2_repository: Path):
    # the engine alone, driven as Triton is: anyone may load and unload (the console's tests cover tokens)
    # ... and clients may use shared memory (off by default, as in Triton)
    settings = EngineSettings(open_repository_control=True, shared_memory=SharedMemoryLimits(allowed=True))
    server = InferenceServer(v2_repository, gpu_count=0, settings=settings)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def v2_app(v2_server: InferenceServer) -> V2App:
    return V2App(v2_server, max_body_bytes=APP_BODY_LIMIT)


@pytest.fixture(scope="session")
def server_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository the server-process tests serve (built once per session)."""
    from tests.engine.frontend.server_process import build_repository

    return build_repository(tmp_path_factory.mktemp("v2-repository"))


@pytest.fixture(scope="session")
def uvicorn_server_url(server_repository: Path, tmp_path_factory: pytest.TempPathFactory):
    """`host:port` of the standalone app under uvicorn, shared by the tritonclient tests."""
    from tests.engine.frontend.server_process import running_server

    log = tmp_path_factory.mktemp("logs") / "uvicorn.log"
    # client shared memory is off by default, as in Triton: these tests use it
    with running_server("uvicorn", server_repository, log, extra_env={"INFERA_ALLOW_CLIENT_SHM": "true"}) as url:
        yield url
