"""tritonclient.grpc against the whole console process: tokens in metadata, roles, the registry, a live switch."""

from __future__ import annotations

import threading
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ServerProcess, manage_command, serve_process
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.server

A = np.arange(16, dtype=np.int32).reshape(1, 16)


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def token_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """A console that demands tokens on /v2 and gRPC, with `simple` registered; (server, inference key, admin key)."""
    var_dir = tmp_path_factory.mktemp(f"grpc-console-{request.param}") / "var"
    make_simple_onnx(var_dir / "models", name="simple")
    env = {"INFERA_INFERENCE_AUTH": "token", "INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", "--server", request.param, env=env) as server:
        manage = manage_command(var_dir, env)

        manage("import_repository", str(var_dir / "models"))
        manage("create_user", "client", "--role", "inference")
        yield server, manage("issue_token", "client"), manage("issue_token", "admin")


def inputs(a: np.ndarray = A) -> list[grpcclient.InferInput]:
    made = []
    for name, array in (("INPUT0", a), ("INPUT1", np.ones_like(a))):
        infer_input = grpcclient.InferInput(name, list(array.shape), "INT32")
        infer_input.set_data_from_numpy(array)
        made.append(infer_input)
    return made


def client_of(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_address)


def wait_ready(client: grpcclient.InferenceServerClient, headers: dict, model: str, version: str = "") -> None:
    for _ in range(1200):
        if client.is_model_ready(model, version, headers=headers):
            return
        threading.Event().wait(0.05)  # polling a server process that loads on its own
    pytest.fail(f"model '{model}' never became ready")


def test_it_needs_a_token_for_inference_but_not_for_health(token_server):
    server, key, _ = token_server
    client = client_of(server)
    assert client.is_server_live()
    with pytest.raises(InferenceServerException) as missing:
        client.infer("simple", inputs())
    assert missing.value.status() == "StatusCode.UNAUTHENTICATED"
    with pytest.raises(InferenceServerException) as wrong:
        client.infer("simple", inputs(), headers={"authorization": "Bearer ifr_wrong-key-000000000000000000"})
    assert wrong.value.status() == "StatusCode.UNAUTHENTICATED" and "invalid API token" in wrong.value.message()
    headers = {"authorization": f"Bearer {key}"}
    wait_ready(client, headers, "simple")
    result = client.infer("simple", inputs(), headers=headers)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + 1)


def test_it_refuses_model_changes_from_an_inference_token(token_server):
    server, key, _ = token_server
    client = client_of(server)
    headers = {"authorization": f"Token {key}"}
    with pytest.raises(InferenceServerException) as refused:
        client.unload_model("simple", headers=headers)
    assert refused.value.status() == "StatusCode.PERMISSION_DENIED"
    assert "role 'inference' may not load or unload models" in refused.value.message()


def test_unload_and_load_change_the_registry(token_server):
    server, _, admin_key = token_server
    client = client_of(server)
    headers = {"authorization": f"Bearer {admin_key}"}
    wait_ready(client, headers, "simple")
    client.unload_model("simple", headers=headers)
    assert not client.is_model_ready("simple", headers=headers)
    assert registry_versions(server, admin_key) == {1: False}
    client.load_model("simple", headers=headers)
    assert client.is_model_ready("simple", headers=headers)
    assert registry_versions(server, admin_key) == {1: True}


def test_a_version_switch_under_concurrent_grpc_load_fails_no_request(token_server, tmp_path):
    server, key, admin_key = token_server
    headers = {"authorization": f"Bearer {key}"}
    wait_ready(client_of(server), headers, "simple")
    stop = threading.Event()
    seen: set[str] = set()
    failures: list[BaseException] = []

    def load() -> None:
        client = client_of(server)
        try:
            while not stop.is_set():
                result = client.infer("simple", inputs(), headers=headers)
                seen.add(result.get_response().model_version)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
        finally:
            client.close()

    workers = [threading.Thread(target=load) for _ in range(8)]
    for worker in workers:
        worker.start()
    try:
        model_file = make_simple_onnx(tmp_path, name="simple") / "1" / "model.onnx"
        number = upload_and_activate(server, admin_key, model_file.read_bytes())
        wait_ready(client_of(server), headers, "simple", str(number))
        for _ in range(1200):  # until the new version answers unversioned requests
            if str(number) in seen:
                break
            threading.Event().wait(0.05)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
    assert not failures, failures[:3]
    assert str(number) in seen


def registry_versions(server: ServerProcess, key: str) -> dict[int, bool]:
    import json

    request = urllib.request.Request(
        f"{server.base_url}/api/models/simple/versions/", headers={"Authorization": f"Token {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        rows = json.load(response)
    rows = rows["results"] if isinstance(rows, dict) else rows
    return {row["number"]: row["should_load"] for row in rows if row["number"] == 1}


def upload_and_activate(server: ServerProcess, key: str, content: bytes) -> int:
    import json

    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="activate"\r\n\r\ntrue\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="model.onnx"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"{server.base_url}/api/models/simple/versions/",
        data=body,
        headers={"Authorization": f"Bearer {key}", "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)["number"]
