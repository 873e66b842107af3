"""Model control mode poll through the whole console process with tritonclient (HTTP and gRPC): the watched
folder's models serve once the server is ready, and repository load and unload are refused with Triton's words
and code (issue 36, item 1). What a pass applies is tested in-process (registry/test_repository_poller.py)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import serve_process
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

TRITON_REFUSAL = "explicit model load / unload is not allowed if polling is enabled"
VALUES = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(scope="module")
def polling(tmp_path_factory: pytest.TempPathFactory):
    """A console in poll mode over a folder holding `simple`, repository control otherwise open to anyone."""
    watched = tmp_path_factory.mktemp("watched")
    make_simple_onnx(watched, name="simple")
    var_dir = tmp_path_factory.mktemp("poll-console") / "var"
    env = {"INFERA_INFERENCE_AUTH": "none", "INFERA_OPEN_REPOSITORY_CONTROL": "true", "INFERA_DISABLE_NVML": "1"}
    flags = ("--no-seed", "--model-control-mode", "poll", "--model-repository", str(watched))
    with serve_process(var_dir, *flags, "--repository-poll-secs", "3600", env=env) as server:
        assert server.wait_for("/v2/health/ready", timeout=120) == 200
        yield server


def client_of(server, module):
    if module is grpcclient:
        return grpcclient.InferenceServerClient(server.grpc_address)
    return httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_watched_folder_serves_once_the_server_is_ready(polling, module) -> None:
    client = client_of(polling, module)
    assert client.is_model_ready("simple")
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(VALUES)
    assert (client.infer("simple", inputs).as_numpy("OUTPUT0") == VALUES * 2).all()


@pytest.mark.parametrize(
    ("module", "code"),
    [(httpclient, "503"), (grpcclient, f"StatusCode.{grpc.StatusCode.UNAVAILABLE.name}")],
    ids=["http", "grpc"],
)
def test_repository_control_is_refused_with_tritons_words_and_code(polling, module, code) -> None:
    client = client_of(polling, module)
    for change in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as refused:
            change("simple")
        assert refused.value.message().startswith(TRITON_REFUSAL)
        assert refused.value.status() == code
    index = client.get_model_repository_index()
    rows = index if module is httpclient else [{"name": r.name, "state": r.state} for r in index.models]
    assert {"name": "simple", "state": "READY"}.items() <= next(r for r in rows if r["name"] == "simple").items()
    assert client.is_model_ready("simple")
