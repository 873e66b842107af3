"""The python backend as Triton's behaves where model code can tell, read against triton-inference-server/
python_backend: a BLS request's model_name given as bytes (pybind11 takes bytes for a std::string), an output whose
dtype differs from the config passed through with its own (src/infer_response.cc gives the response output the
tensor's dtype; the core checks it against no config), BF16 `as_numpy()` raising TritonModelException with Triton's
words (src/pb_tensor.cc), and `args["model_repository"]` the model's own folder, absolute (src/stub_launcher.cc)."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from engine.backends.python_utils import BF16_AS_NUMPY, InferenceRequest, Tensor, TritonModelException
from tests.engine.frontend.server_process import ROOT, free_port, running_server
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

ONE_INSTANCE = "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
INT32_PAIR = [("INPUT0", "TYPE_INT32", [16]), ("INPUT1", "TYPE_INT32", [16])]

# a BLS call to `simple` naming it, and its output, in bytes
BLS_BYTES_NAME = textwrap.dedent(
    """
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                call = pb_utils.InferenceRequest(
                    model_name=b"simple", inputs=request.inputs(), requested_output_names=[b"OUTPUT0"]
                )
                answer = call.exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                responses.append(pb_utils.InferenceResponse(answer.output_tensors()))
            return responses
    """
)

# the config says FP32; the model answers FP64
WIDE = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.astype(np.float64) / 3)]))
            return responses
    """
)

# what as_numpy() of a BF16 input does, and the initialize args' model_repository
PROBE = textwrap.dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def initialize(self, args):
            self.repository = args["model_repository"]

        def execute(self, requests):
            responses = []
            for request in requests:
                tensor = pb_utils.get_input_tensor_by_name(request, "X")
                try:
                    tensor.as_numpy()
                    raised = None
                except pb_utils.TritonModelException as exc:
                    raised = [type(exc).__name__, str(exc)]
                seen = {"as_numpy": raised, "model_repository": self.repository, "dtype": tensor.triton_dtype()}
                text = np.array([json.dumps(seen).encode()], dtype=object)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", text)]))
            return responses
    """
)


@dataclass
class Served:
    http_url: str
    grpc_url: str
    repo: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("parity-repository")
    make_simple_onnx(repo, name="simple")
    make_python_model(
        repo, "bls_bytes_name", BLS_BYTES_NAME, python_config("bls_bytes_name", INT32_PAIR, INT32_PAIR[:1]), 1
    )
    fp32 = [("X", "TYPE_FP32", [4])], [("Y", "TYPE_FP32", [4])]
    make_python_model(repo, "wide", WIDE, python_config("wide", *fp32), extra_config=ONE_INSTANCE)
    probe = [("X", "TYPE_BF16", [4])], [("TEXT", "TYPE_STRING", [1])]
    make_python_model(repo, "probe", PROBE, python_config("probe", *probe, max_batch_size=0), extra_config=ONE_INSTANCE)
    grpc_port = free_port()
    log = tmp_path_factory.mktemp("parity-logs") / "uvicorn.log"
    # the repository named relative to the server's folder: model_repository must still come out absolute
    env = {"INFERA_GRPC_PORT": str(grpc_port), "INFERA_MODEL_REPOSITORY": os.path.relpath(repo, ROOT)}
    with running_server("uvicorn", repo, log, extra_env=env) as url:
        yield Served(url, f"127.0.0.1:{grpc_port}", repo)


def _inputs(module, arrays: dict[str, tuple[np.ndarray, str]]) -> list:
    inputs = []
    for name, (array, datatype) in arrays.items():
        entry = module.InferInput(name, list(array.shape), datatype)
        entry.set_data_from_numpy(array)
        inputs.append(entry)
    return inputs


CLIENTS = [pytest.param(httpclient, id="http"), pytest.param(grpcclient, id="grpc")]


def _client(module, served: Served):
    return module.InferenceServerClient(served.http_url if module is httpclient else served.grpc_url)


# ---- pb_utils alone


def test_it_takes_model_and_output_names_as_bytes_as_triton_does():
    request = InferenceRequest(model_name=b"simple", requested_output_names=[b"OUTPUT0"], request_id=b"r-1")
    assert (request.model_name(), request.requested_output_names(), request.request_id()) == (
        "simple",
        ["OUTPUT0"],
        "r-1",
    )
    with pytest.raises(TritonModelException, match="model_name b'\\\\xff' is not UTF-8 text"):
        InferenceRequest(model_name=b"\xff")


def test_it_refuses_bf16_as_numpy_with_tritons_exception_and_words():
    tensor = Tensor("X", np.ones(4, dtype=ml_dtypes.bfloat16))
    with pytest.raises(TritonModelException) as raised:
        tensor.as_numpy()
    assert str(raised.value).startswith("Tensor dtype is BF16 and cannot be converted to NumPy.")
    assert str(raised.value) == BF16_AS_NUMPY
    assert Tensor("Y", np.ones(4, np.float32)).as_numpy().dtype == np.float32


# ---- through a real server, HTTP and gRPC


@pytest.mark.server
@pytest.mark.parametrize("module", CLIENTS)
def test_a_bls_request_names_its_model_in_bytes(served, module):
    a, b = np.arange(16, dtype=np.int32).reshape(1, 16), np.full((1, 16), 2, np.int32)
    inputs = _inputs(module, {"INPUT0": (a, "INT32"), "INPUT1": (b, "INT32")})
    result = _client(module, served).infer("bls_bytes_name", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.mark.server
@pytest.mark.parametrize("module", CLIENTS)
def test_an_output_of_another_dtype_than_the_configs_passes_through_as_its_own(served, module):
    x = np.array([[1, 2, 3, 4]], np.float32)
    result = _client(module, served).infer("wide", _inputs(module, {"X": (x, "FP32")}))
    y = result.as_numpy("Y")
    assert y.dtype == np.float64  # Triton answers FP64 for an FP32 config; no 500
    np.testing.assert_array_equal(y, x.astype(np.float64) / 3)
    output = result.get_output("Y")
    assert (output["datatype"] if module is httpclient else output.datatype) == "FP64"


@pytest.mark.server
@pytest.mark.parametrize("module", CLIENTS)
def test_bf16_as_numpy_raises_in_model_code_as_triton(served, module):
    x = np.array([1.0, -2.5, 3.0, 1024.0], dtype=ml_dtypes.bfloat16)
    result = _client(module, served).infer("probe", _inputs(module, {"X": (x, "BF16")}))
    seen = json.loads(result.as_numpy("TEXT")[0])
    assert seen["dtype"] == "BF16"
    assert seen["as_numpy"][0] == "TritonModelException"
    assert seen["as_numpy"][1].startswith("Tensor dtype is BF16 and cannot be converted to NumPy.")


@pytest.mark.server
def test_model_repository_is_the_models_own_absolute_folder(served):
    x = np.zeros(4, dtype=ml_dtypes.bfloat16)
    result = _client(httpclient, served).infer("probe", _inputs(httpclient, {"X": (x, "BF16")}))
    repository = json.loads(result.as_numpy("TEXT")[0])["model_repository"]
    assert os.path.isabs(repository)
    assert Path(repository).resolve() == (served.repo / "probe").resolve()
