"""Model control mode none through a real server with tritonclient (HTTP and gRPC): repository load and unload
refused with Triton's message and code (UNAVAILABLE), the repository index and inference still served (issue 36,
item 1)."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.server_process import Served, running_with_grpc
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

TRITON_REFUSAL = "explicit model load / unload is not allowed if polling is enabled"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The engine alone in model control mode none, repository control otherwise open to anyone (as Triton's)."""
    repo = tmp_path_factory.mktemp("model-control")
    make_simple_onnx(repo, name="simple")
    log = tmp_path_factory.mktemp("model-control-logs") / "uvicorn.log"
    with running_with_grpc(repo, log, {"INFERA_MODEL_CONTROL_MODE": "none"}) as served:
        yield served


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_it_refuses_loads_and_unloads_with_tritons_words(served: Served, module) -> None:
    client = served.client(module)
    for change in (client.load_model, client.unload_model):
        with pytest.raises(InferenceServerException) as refused:
            change("simple")
        assert refused.value.message().startswith(TRITON_REFUSAL)
        assert "model control mode 'none'" in refused.value.message()
        if module is httpclient:
            assert refused.value.status() == "503"
        else:
            assert refused.value.status() == f"StatusCode.{grpc.StatusCode.UNAVAILABLE.name}"
    assert client.is_model_ready("simple")


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_it_still_answers_the_index_and_inference(served: Served, module) -> None:
    client = served.client(module)
    index = client.get_model_repository_index()
    rows = index if module is httpclient else [{"name": row.name, "state": row.state} for row in index.models]
    assert {"name": "simple", "state": "READY"}.items() <= next(r for r in rows if r["name"] == "simple").items()
    values = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(values)
    result = client.infer("simple", inputs)
    assert (result.as_numpy("OUTPUT0") == values * 2).all()
