"""Repository loads with `file:` contents, over HTTP and gRPC, as Triton's QA sends them (L0_lifecycle,
L0_input_validation, L0_backend_python/model_control): the paths Triton takes, the escapes and names it refuses.

One real server per module, with TMPDIR pointed at a folder of its own, so every test can check that no
`infera-files-*` folder outlives a load that failed or a model that was unloaded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.server_process import IDENTITY_SOURCE, free_port, running_server
from tests.engine.frontend.v2_checks import raw_request, simple_inputs
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), 2, dtype=np.int32)
ONNX_CONFIG = json.dumps({"backend": "onnxruntime", "max_batch_size": 8})
PYTHON_CONFIG = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 4,
        "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    }
)
# Triton's QA (L0_backend_python/model_control) loads these names and expects them served
VALID_NAMES = ["TestModel123", "model-with-hyphens", "model_with_underscores", "model.version1", "model..1"]
# ... and refuses a name holding any character its python backend refuses in a stub name
CHARACTER_NAMES = [f"model{character}test" for character in ";|&$`<>()[]{}\\\"'*?~#!"]
# L0_input_validation: names that climb out of the repository, and names that are blank
TRAVERSAL_NAMES = ["../etc", "a/../b", "../../etc/passwd", "model/..", "..", "/etc/passwd", "model/subdir", "model/"]
BLANK_NAMES = [" ..", ".. ", " ", "\t", " \t \n "]
ESCAPES = [
    "../../root/.bashrc",
    "../escape_symlink/new_dir/test.txt",
    "1/../../model.onnx",
    "/../1/model.onnx",
    "//../../etc/passwd",
    "1/./../../x",
]


@dataclass(frozen=True)
class Served:
    """The server under test: its HTTP and gRPC addresses and the temporary folder it writes sent files to."""

    http_url: str
    grpc_url: str
    temp_dir: Path
    onnx_bytes: bytes

    def sent_folders(self) -> list[Path]:
        return sorted(self.temp_dir.glob("infera-files-*"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("file-loads-repository")
    make_simple_onnx(repo, name="simple")
    made = tmp_path_factory.mktemp("file-loads-model")
    onnx_bytes = (make_simple_onnx(made, name="sent") / "1" / "model.onnx").read_bytes()
    temp_dir = tmp_path_factory.mktemp("file-loads-tmp")
    grpc_port = free_port()
    # Triton's QA loads python models anonymously: code through open repository control is its explicit opt-in
    env = {
        "TMPDIR": str(temp_dir),
        "INFERA_GRPC_PORT": str(grpc_port),
        "INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE": "true",
    }
    log = tmp_path_factory.mktemp("file-loads-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log, extra_env=env) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}", temp_dir, onnx_bytes)


@pytest.fixture(scope="module")
def http_client(served: Served) -> Iterator[httpclient.InferenceServerClient]:
    with httpclient.InferenceServerClient(served.http_url) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_client(served: Served) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(served.grpc_url) as client:
        yield client


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, http_client, grpc_client):
    return http_client if request.param == "http" else grpc_client


def refusal(client, name: str, **load) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(name, **load)
    return caught.value


def assert_invalid(client, error: InferenceServerException) -> None:
    """Triton's answer to a bad argument: HTTP 400, gRPC INVALID_ARGUMENT."""
    expected = "400" if isinstance(client, httpclient.InferenceServerClient) else "StatusCode.INVALID_ARGUMENT"
    assert error.status() == expected, error


def assert_simple_serves(served: Served, name: str = "simple") -> None:
    with httpclient.InferenceServerClient(served.http_url) as client:
        result = client.infer(name, simple_inputs(A, B))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)


def unload(client, name: str) -> None:
    client.unload_model(name)
    assert not client.is_model_ready(name)


@pytest.mark.parametrize("path", ["1/model.onnx", "/1/model.onnx"])
@pytest.mark.parametrize("name", VALID_NAMES)
def test_it_loads_sent_files_named_as_triton_clients_name_them(served, client, name, path):
    client.load_model(name, config=ONNX_CONFIG, files={f"file:{path}": served.onnx_bytes})
    assert client.is_model_ready(name, "1")
    assert len(served.sent_folders()) == 1
    assert_simple_serves(served, name)
    unload(client, name)
    assert served.sent_folders() == []


def test_it_loads_a_python_model_sent_as_triton_qa_sends_it(served, http_client):
    http_client.load_model("TestModel123", config=PYTHON_CONFIG, files={"file:/1/model.py": IDENTITY_SOURCE.encode()})
    assert http_client.is_model_ready("TestModel123", "1")
    assert http_client.get_model_config("TestModel123")["backend"] == "python"
    unload(http_client, "TestModel123")
    assert served.sent_folders() == []


@pytest.mark.parametrize("path", ESCAPES)
def test_it_refuses_paths_that_leave_the_model_folder_naming_the_file(served, client, path):
    error = refusal(client, "escaper", config=ONNX_CONFIG, files={f"file:{path}": b"should not exist"})
    assert_invalid(client, error)
    assert f"'{path}'" in error.message() and "leaves the model folder" in error.message()
    assert not client.is_model_ready("escaper")
    assert served.sent_folders() == []
    assert_simple_serves(served)


def test_it_keeps_an_absolute_path_inside_the_model_folder(served, http_client, tmp_path):
    outside = tmp_path / "outside.txt"
    files = {"file:/1/model.onnx": served.onnx_bytes, f"file:{outside}": b"should not exist"}
    http_client.load_model("absolute", config=ONNX_CONFIG, files=files)
    assert not outside.exists()
    (folder,) = served.sent_folders()
    assert (folder / "absolute" / outside.relative_to("/")).read_bytes() == b"should not exist"
    assert_simple_serves(served, "absolute")
    unload(http_client, "absolute")
    assert served.sent_folders() == []


def test_it_loads_a_valid_name_after_refusing_an_escape(served, client):
    assert_invalid(client, refusal(client, "TestModel123", config=ONNX_CONFIG, files={"file:../1/model.onnx": b""}))
    client.load_model("TestModel123", config=ONNX_CONFIG, files={"file:/1/model.onnx": served.onnx_bytes})
    assert client.is_model_ready("TestModel123")
    unload(client, "TestModel123")
    assert served.sent_folders() == []


def assert_name_refused(served: Served, client, name: str) -> None:
    error = refusal(client, name, config=ONNX_CONFIG, files={"file:1/model.onnx": served.onnx_bytes})
    assert_invalid(client, error)
    assert "is invalid" in error.message()
    assert served.sent_folders() == []
    assert_simple_serves(served)


@pytest.mark.parametrize("name", CHARACTER_NAMES + BLANK_NAMES + [".."])
def test_it_refuses_model_names_triton_refuses(served, client, name):
    assert_name_refused(served, client, name)


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)  # over HTTP a '/' in a name is a different path (404)
def test_it_refuses_model_names_that_climb_out_over_grpc(served, grpc_client, name):
    assert_name_refused(served, grpc_client, name)


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("1/" + "n" * 300 + ".onnx", "longer than 255 bytes"),
        ("1/" + "é" * 200, "longer than 255 bytes"),
        ("/".join(["d" * 200] * 6), "longer than 1024 bytes"),
    ],
)
def test_it_answers_400_to_a_file_name_too_long_and_leaves_no_folder(served, client, path, why):
    error = refusal(client, "long_names", config=ONNX_CONFIG, files={f"file:{path}": served.onnx_bytes})
    assert_invalid(client, error)
    assert why in error.message() and path[:40] in error.message()
    assert served.sent_folders() == []
    assert_simple_serves(served)


def test_it_removes_the_folder_of_a_model_that_fails_to_load(served, client):
    error = refusal(client, "bad_bytes", config=ONNX_CONFIG, files={"file:1/model.onnx": b"not an onnx model"})
    assert_invalid(client, error)
    assert "failed to load 'bad_bytes'" in error.message()
    assert not client.is_model_ready("bad_bytes")
    assert served.sent_folders() == []
    assert_simple_serves(served)


def test_it_refuses_two_spellings_of_one_file(served, client):
    files = {"file:1/model.onnx": served.onnx_bytes, "file:/1/model.onnx": served.onnx_bytes}
    error = refusal(client, "twice", config=ONNX_CONFIG, files=files)
    assert_invalid(client, error)
    assert "another file parameter names too" in error.message()
    assert served.sent_folders() == []


@pytest.mark.parametrize("order", [("1/model.onnx", "1/model.onnx/x"), ("/1/model.onnx/x", "1/model.onnx")])
def test_it_refuses_a_file_sent_where_another_needs_a_folder(served, client, order):
    files = {f"file:{path}": served.onnx_bytes for path in order}
    error = refusal(client, "clash", config=ONNX_CONFIG, files=files)
    assert_invalid(client, error)
    assert "needs '1/model.onnx' to be a folder" in error.message()
    assert all(f"'{path}'" in error.message() for path in order)
    assert served.sent_folders() == []
    assert_simple_serves(served)


def test_it_refuses_file_contents_that_are_not_base64_over_http(served):
    body = json.dumps({"parameters": {"config": ONNX_CONFIG, "file:1/model.onnx": "not base64!"}}).encode()
    answer = raw_request(served.http_url, "POST", "/v2/repository/models/garbled/load", body)
    assert answer.status == 400
    assert "'file:1/model.onnx' is not valid base64" in answer.error()
    assert served.sent_folders() == []


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (service_pb2.ModelRepositoryParameter(string_param="not base64!"), "is not valid base64"),
        (service_pb2.ModelRepositoryParameter(int64_param=7), "must carry the file's contents"),
    ],
)
def test_it_refuses_file_contents_that_are_not_bytes_over_grpc(served, value, why):
    parameters = {"config": service_pb2.ModelRepositoryParameter(string_param=ONNX_CONFIG), "file:1/model.onnx": value}
    request = service_pb2.RepositoryModelLoadRequest(model_name="garbled", parameters=parameters)
    with grpc.insecure_channel(served.grpc_url) as channel:
        with pytest.raises(grpc.RpcError) as caught:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert why in caught.value.details() and "'file:1/model.onnx'" in caught.value.details()
    assert served.sent_folders() == []


def test_it_removes_the_sent_folder_when_the_model_reloads_from_the_repository(served, http_client):
    http_client.load_model("simple", config=ONNX_CONFIG, files={"file:1/model.onnx": served.onnx_bytes})
    assert len(served.sent_folders()) == 1
    http_client.load_model("simple")
    left = served.sent_folders()
    assert_simple_serves(served)
    if left:  # put the module's server back as it was before failing
        http_client.unload_model("simple")
        http_client.load_model("simple")
    assert left == []
