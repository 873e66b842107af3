"""One parser for repository loads: HTTP and gRPC accept and refuse the same parameters, in the same words.

The parser alone first, then both front ends of one real server (tritonclient where it can send the form, raw
requests for the forms no client sends).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath

import grpc
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from engine.errors import InvalidArgument
from engine.frontend.repository_load import parse_load_request
from tests.engine.frontend.server_process import free_port, running_server
from tests.engine.frontend.v2_checks import raw_request
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

ONNX_CONFIG = json.dumps({"backend": "onnxruntime", "max_batch_size": 8})
NOT_A_STRING = "failed to load 'simple': parameter 'config' must be a JSON string"
Parameter = service_pb2.ModelRepositoryParameter


# ---- the parser


def test_it_takes_a_config_as_a_json_string_or_an_object_and_no_config_at_all():
    assert parse_load_request("simple", {"config": ONNX_CONFIG}).config == ONNX_CONFIG
    assert parse_load_request("simple", {"config": {"max_batch_size": 8}}).config == {"max_batch_size": 8}
    assert parse_load_request("simple", {}).config is None
    assert parse_load_request("simple", {"unknown": 3}).files == {}


@pytest.mark.parametrize("config", [None, 7, True, b"{}", ["{}"]])
def test_it_refuses_a_config_that_is_neither_a_string_nor_an_object(config):
    with pytest.raises(InvalidArgument) as caught:
        parse_load_request("simple", {"config": config})
    assert caught.value.message == NOT_A_STRING


def test_it_takes_files_as_bytes_or_base64_and_normalises_their_paths():
    request = parse_load_request("sent", {"file:/1/model.onnx": b"\x01", "file:1/config.pbtxt": "AQ=="})
    assert request.files == {"/1/model.onnx": b"\x01", "1/config.pbtxt": b"\x01"}
    assert request.normalised == {PurePosixPath("1/model.onnx"): b"\x01", PurePosixPath("1/config.pbtxt"): b"\x01"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("not base64!", "parameter 'file:1/model.onnx' is not valid base64"),
        (7, "parameter 'file:1/model.onnx' must carry the file's contents as bytes or base64 text"),
    ],
)
def test_it_refuses_file_contents_naming_the_model_and_the_parameter(value, why):
    with pytest.raises(InvalidArgument) as caught:
        parse_load_request("sent", {"file:1/model.onnx": value})
    assert caught.value.message == f"failed to load 'sent': {why}"


def test_it_refuses_a_file_path_that_leaves_the_model_folder():
    with pytest.raises(InvalidArgument) as caught:
        parse_load_request("sent", {"file:../1/model.onnx": b""})
    assert caught.value.message.startswith("failed to load 'sent': ") and "leaves the model folder" in str(caught.value)


# ---- both front ends of a real server


@dataclass(frozen=True)
class Served:
    http_url: str
    grpc_url: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("load-parity-repository")
    make_simple_onnx(repo, name="simple")
    grpc_port = free_port()
    log = tmp_path_factory.mktemp("load-parity-logs") / "uvicorn.log"
    with running_server("uvicorn", repo, log, extra_env={"INFERA_GRPC_PORT": str(grpc_port)}) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}")


def http_load(served: Served, parameters: dict) -> tuple[bool, str]:
    """Whether a raw HTTP load of `simple` with these parameters succeeded, and its error when it did not."""
    body = json.dumps({"parameters": parameters}).encode()
    answer = raw_request(served.http_url, "POST", "/v2/repository/models/simple/load", body)
    assert answer.status in (200, 400), answer
    return answer.status == 200, "" if answer.status == 200 else answer.error()


def grpc_load(served: Served, parameters: dict[str, Parameter]) -> tuple[bool, str]:
    """The same over gRPC: INVALID_ARGUMENT is HTTP's 400."""
    request = service_pb2.RepositoryModelLoadRequest(model_name="simple", parameters=parameters)
    with grpc.insecure_channel(served.grpc_url) as channel:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).RepositoryModelLoad(request)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
            return False, error.details()
    return True, ""


# each form a client may send over both: its JSON value (HTTP), its ModelRepositoryParameter (gRPC), the answer
FORMS = {
    "a JSON string": ({"config": ONNX_CONFIG}, {"config": Parameter(string_param=ONNX_CONFIG)}, ""),
    "an empty string": ({"config": ""}, {"config": Parameter(string_param="")}, ""),
    "no config": ({}, {}, ""),
    "an unknown parameter": ({"colour": "blue"}, {"colour": Parameter(string_param="blue")}, ""),
    "a number": ({"config": 7}, {"config": Parameter(int64_param=7)}, NOT_A_STRING),
    "a boolean": ({"config": True}, {"config": Parameter(bool_param=True)}, NOT_A_STRING),
    "no value": ({"config": None}, {"config": Parameter()}, NOT_A_STRING),
    "text that is not JSON": ({"config": "{nope"}, {"config": Parameter(string_param="{nope")}, "parameters.config"),
    "JSON that is not an object": ({"config": "[1]"}, {"config": Parameter(string_param="[1]")}, "JSON object"),
    "a file not in base64": (
        {"file:1/model.onnx": "not base64!"},
        {"file:1/model.onnx": Parameter(string_param="not base64!")},
        "failed to load 'simple': parameter 'file:1/model.onnx' is not valid base64",
    ),
    "a file that is a number": (
        {"file:1/model.onnx": 7},
        {"file:1/model.onnx": Parameter(int64_param=7)},
        "failed to load 'simple': parameter 'file:1/model.onnx' must carry the file's contents",
    ),
}


@pytest.mark.parametrize("form", FORMS)
def test_it_accepts_and_refuses_the_same_loads_over_http_and_grpc(served, form):
    http_parameters, grpc_parameters, refusal = FORMS[form]
    over_http, over_grpc = http_load(served, http_parameters), grpc_load(served, grpc_parameters)
    assert over_http == over_grpc
    loaded, error = over_http
    assert loaded is not bool(refusal), error
    assert refusal in error


@pytest.mark.parametrize("client_class", [httpclient.InferenceServerClient, grpcclient.InferenceServerClient])
def test_it_answers_tritonclient_the_same_on_both_front_ends(served, client_class):
    url = served.http_url if client_class is httpclient.InferenceServerClient else served.grpc_url
    with client_class(url) as client:
        client.load_model("simple", config=ONNX_CONFIG)
        assert client.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("simple", config="[1]")
        assert "parameters.config must be a JSON object" in caught.value.message()
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("simple", config=ONNX_CONFIG, files={"file:../1/model.onnx": b""})
        assert "failed to load 'simple'" in caught.value.message()
        assert "leaves the model folder" in caught.value.message()
        assert client.is_model_ready("simple")


def test_it_takes_a_config_object_over_http_where_json_can_carry_one(served):
    # a gRPC parameter holds a string, an integer, a boolean or bytes: an object has no form there
    assert http_load(served, {"config": {"backend": "onnxruntime", "max_batch_size": 8}}) == (True, "")
