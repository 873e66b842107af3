"""Client shared memory as recent Triton serves it, through real servers with tritonclient (HTTP and gRPC): off
unless the server allows it (Triton's refusal word for word), keys under Triton's reserved prefix refused, and a
region unregistered while a request holds it stays registered until that request has answered (issue 36, item 4)."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from tests.engine.frontend.server_process import Served, client_region, running_with_grpc
from tests.engine.model_factory import make_python_model, python_config

pytestmark = pytest.mark.server

TRITON_REFUSAL = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
RESERVED = "triton_python_backend_shm_region_"
# OUT = IN, answered once the file the request's "gate" parameter names exists; "<gate>.started" says it is waiting
GATED = textwrap.dedent(
    """
    import json
    import os
    import threading

    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            answers = []
            for request in requests:
                gate = json.loads(request.parameters())["gate"]
                open(gate + ".started", "w").close()
                while not os.path.exists(gate):
                    threading.Event().wait(0.01)
                values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
                answers.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", values)]))
            return answers
    """
)
VALUES = np.array([5, 6, 7, 8], dtype=np.int32)


def serve(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Served]:
    repo = tmp_path_factory.mktemp("client-shm")
    config = python_config("gated", [("IN", "TYPE_INT32", [4])], [("OUT", "TYPE_INT32", [4])], 0)
    make_python_model(repo, "gated", GATED, config)
    with running_with_grpc(repo, tmp_path_factory.mktemp("client-shm-logs") / "uvicorn.log", env) as served:
        yield served


@pytest.fixture(scope="module")
def by_default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server started without the setting."""
    yield from serve(tmp_path_factory, {})


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server started with INFERA_ALLOW_CLIENT_SHM=true (Triton's --allow-client-shm=true)."""
    yield from serve(tmp_path_factory, {"INFERA_ALLOW_CLIENT_SHM": "true"})


@pytest.fixture
def region() -> Iterator[tuple[str, object]]:
    """A fresh shared memory object of 64 bytes: (its key, tritonclient's handle on it)."""
    with client_region(64) as made:
        yield made


def refusal(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as refused:
        call()
    return refused.value


def names(client) -> set[str]:
    status = client.get_system_shared_memory_status()
    if isinstance(client, grpcclient.InferenceServerClient):
        return set(status.regions)
    return {entry["name"] for entry in status}


@pytest.mark.parametrize(("module", "code"), [(httpclient, "501"), (grpcclient, "StatusCode.UNIMPLEMENTED")])
def test_registering_is_refused_by_default_with_tritons_message(by_default, region, module, code):
    key, _ = region
    client = by_default.client(module)
    refused = refusal(lambda: client.register_system_shared_memory("io", key, 64))
    assert refused.message().startswith(TRITON_REFUSAL) and refused.status() == code
    refused = refusal(lambda: client.unregister_system_shared_memory("io"))
    assert refused.message().startswith(TRITON_REFUSAL)
    assert names(client) == set()  # status answers either way


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_the_setting_allows_registering(allowed, region, module):
    key, _ = region
    client = allowed.client(module)
    client.register_system_shared_memory("io", key, 64)
    try:
        assert "io" in names(client)
    finally:
        client.unregister_system_shared_memory("io")
    assert "io" not in names(client)


@pytest.mark.parametrize("key", [f"/{RESERVED}0", f"{RESERVED}input", f"//{RESERVED}"])
@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_key_under_tritons_reserved_prefix_is_refused(allowed, module, key):
    client = allowed.client(module)
    refused = refusal(lambda: client.register_system_shared_memory("io", key, 64))
    assert refused.message().startswith(
        f"cannot register shared memory region 'io' with key '{key}' as the key contains the reserved prefix "
        f"'{RESERVED}'"
    )
    assert "io" not in names(client)


@pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])
def test_a_region_unregistered_during_a_request_stays_until_the_request_has_answered(allowed, region, module, tmp_path):
    key, handle = region
    shm.set_shared_memory_region(handle, [VALUES])
    client = allowed.client(module)
    name = f"held_{module.__name__.rsplit('.', 1)[-1]}"
    client.register_system_shared_memory(name, key, 64)
    given = module.InferInput("IN", [4], "INT32")
    given.set_shared_memory(name, 16)
    wanted = module.InferRequestedOutput("OUT")
    wanted.set_shared_memory(name, 16, offset=32)  # written after the model answers: the region must still be there
    gate = tmp_path / name
    with ThreadPoolExecutor(1) as pool:

        def infer():  # with a client of its own: the HTTP client's connections belong to the thread that made them
            return allowed.client(module).infer("gated", [given], outputs=[wanted], parameters={"gate": str(gate)})

        answer = pool.submit(infer)
        started = Path(f"{gate}.started")
        for _ in range(3000):
            if started.exists() or answer.done():
                break
            threading.Event().wait(0.01)  # polling the model's marker in another process
        assert started.exists(), answer.result()
        client.unregister_system_shared_memory(name)
        assert name in names(client)  # held by the request in flight: still listed
        refused = refusal(lambda: client.register_system_shared_memory(name, key, 64))
        assert f"shared memory region '{name}' already in manager" in refused.message()
        gate.touch()
        answer.result(timeout=60)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(handle, np.int32, [4], offset=32), VALUES)
    assert name not in names(client)  # the request has answered: the region is gone


# ---- manage.py serve --allow-client-shm (Triton's flag)


@pytest.mark.slow
def test_serve_takes_tritons_allow_client_shm_flag(tmp_path, region):
    from tests.conftest import serve_process

    key, _ = region
    with serve_process(tmp_path / "var", "--no-seed", "--allow-client-shm=true") as server:
        assert server.wait_for("/v2/health/ready") == 200
        client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
        client.register_system_shared_memory("io", key, 64)
        assert names(client) == {"io"}
        client.unregister_system_shared_memory("io")


def test_serve_passes_the_setting_to_each_worker(worker_commands, tmp_path):
    from console.config import read_settings
    from console.hosting import workers

    infera = read_settings({"INFERA_VAR_DIR": str(tmp_path), "INFERA_ALLOW_CLIENT_SHM": "true"})
    workers.run_workers("127.0.0.1", 8000, 2, infera, {"server": "uvicorn", "no_access_log": False})
    assert "--allow-client-shm true" in " ".join(worker_commands[0])
