"""Issue 32, finding 11: open repository control lets anonymous callers load models without code, never code.

The attack: with INFERA_OPEN_REPOSITORY_CONTROL=true, an anonymous caller sent a `model.py` to /v2's repository
load (or gRPC's RepositoryModelLoad) and the server ran it. The rule now: open control loads and unloads models
that run no code; a python model or a .pt2 needs an admin, unless INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE=true
is set too (Triton's own test suites load python models anonymously), which start-up warns about.
"""

from __future__ import annotations

import base64
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import orjson
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from engine.environment.values import SettingError
from engine.frontend import V2App
from engine.frontend.grpc_server import GrpcFrontEnd
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings, GrpcSettings, read_engine_settings
from tests.conftest import serve_process
from tests.engine.frontend.asgi_client import call
from tests.engine.frontend.server_process import free_port, running_server
from tests.engine.model_factory import make_simple_onnx

RULE = "INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE"
# an identity model whose import leaves a folder behind when it runs in the server (the sandbox forbids the write)
SOURCE = textwrap.dedent(
    """
    import os

    import triton_python_backend_utils as pb_utils

    try:
        os.makedirs({marker!r}, exist_ok=True)
    except OSError:
        pass


    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
                )
                for r in requests
            ]
    """
)
CONFIG = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [1]}],
}


def python_files(marker: Path) -> dict[str, bytes]:
    return {"file:1/model.py": SOURCE.format(marker=str(marker)).encode()}


def load_body(marker: Path) -> bytes:
    parameters = {path: base64.b64encode(content).decode() for path, content in python_files(marker).items()}
    return orjson.dumps({"parameters": {**parameters, "config": json.dumps(CONFIG)}})


def test_the_code_opt_in_needs_open_control_and_both_make_it():
    with pytest.raises(SettingError, match="INFERA_OPEN_REPOSITORY_CONTROL=true"):
        read_engine_settings({RULE: "true"})
    assert not read_engine_settings({"INFERA_OPEN_REPOSITORY_CONTROL": "true"}).anonymous_may_load_code
    both = read_engine_settings({"INFERA_OPEN_REPOSITORY_CONTROL": "true", RULE: "true"})
    assert both.anonymous_may_load_code


# ---- the engine's own front ends, in process


@pytest.fixture
async def open_server(tmp_path: Path):
    (tmp_path / "repository").mkdir()
    server = InferenceServer(
        tmp_path / "repository", gpu_count=0, settings=EngineSettings(open_repository_control=True)
    )
    await server.start()
    yield server
    await server.stop()


async def test_an_anonymous_http_caller_with_open_control_may_not_load_a_python_model(open_server, tmp_path):
    marker = tmp_path / "ran"
    answer = await call(V2App(open_server), "POST", "/v2/repository/models/py/load", load_body(marker))
    assert answer.status == 403, answer.body
    error = answer.json()["error"]
    assert "INFERA_OPEN_REPOSITORY_CONTROL" in error and RULE in error and "model.py" in error
    assert not marker.exists() and not open_server.model_ready("py")
    make_simple_onnx(tmp_path / "sent", name="plain")  # a model without code still loads anonymously
    onnx = (tmp_path / "sent" / "plain" / "1" / "model.onnx").read_bytes()
    body = orjson.dumps({"parameters": {"file:1/model.onnx": base64.b64encode(onnx).decode()}})
    assert (await call(V2App(open_server), "POST", "/v2/repository/models/plain/load", body)).status == 200
    assert open_server.model_ready("plain")


async def test_an_anonymous_grpc_caller_with_open_control_may_not_load_a_python_model(open_server, tmp_path):
    marker = tmp_path / "ran"
    front_end = GrpcFrontEnd(open_server, GrpcSettings(port=0, shutdown_grace_seconds=1))
    await front_end.start()
    client = aioclient.InferenceServerClient(f"127.0.0.1:{front_end.port}")
    try:
        with pytest.raises(InferenceServerException, match=RULE) as refused:
            await client.load_model("py", config=json.dumps(CONFIG), files=python_files(marker))
        assert refused.value.status() == str(grpc.StatusCode.PERMISSION_DENIED)
    finally:
        await client.close()
        await front_end.stop()
    assert not marker.exists() and not open_server.model_ready("py")


# ---- real servers


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """`manage.py serve` (uvicorn) with open repository control and nothing else: (HTTP host:port, gRPC one)."""
    var_dir = tmp_path_factory.mktemp("open-control") / "var"
    with serve_process(var_dir, "--no-seed", env={"INFERA_OPEN_REPOSITORY_CONTROL": "true"}) as server:
        yield server.base_url.removeprefix("http://"), server.grpc_address


@pytest.mark.server
def test_the_console_with_open_control_refuses_anonymous_code_on_http_and_grpc(console_url, tmp_path):
    http_url, grpc_url = console_url
    marker = tmp_path / "ran"
    with httpclient.InferenceServerClient(http_url, network_timeout=120) as client:
        with pytest.raises(InferenceServerException, match=RULE) as refused:
            client.load_model("py", config=json.dumps(CONFIG), files=python_files(marker))
        assert refused.value.status() == "403"
    client = grpcclient.InferenceServerClient(grpc_url)
    try:
        with pytest.raises(InferenceServerException, match=RULE) as refused:
            client.load_model("py_grpc", config=json.dumps(CONFIG), files=python_files(marker))
        assert refused.value.status() == str(grpc.StatusCode.PERMISSION_DENIED)
    finally:
        client.close()
    assert not marker.exists()


@pytest.mark.server
def test_with_the_explicit_opt_in_an_anonymous_caller_loads_a_python_model(tmp_path):
    repo = tmp_path / "repository"
    repo.mkdir()
    grpc_port = free_port()
    log = tmp_path / "uvicorn.log"
    env = {RULE: "true", "INFERA_GRPC_PORT": str(grpc_port)}
    with running_server("uvicorn", repo, log, extra_env=env) as url:
        with httpclient.InferenceServerClient(url, network_timeout=120) as client:
            client.load_model("py", config=json.dumps(CONFIG), files=python_files(tmp_path / "ran"))
            assert client.is_model_ready("py")
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        try:
            client.load_model("py_grpc", config=json.dumps(CONFIG), files=python_files(tmp_path / "ran"))
            assert client.is_model_ready("py_grpc")
        finally:
            client.close()
        assert (tmp_path / "ran").exists()  # its code ran in the server
    assert RULE in log.read_text() and "run any code" in log.read_text()  # start-up said so
