"""tritonclient against the whole console process: tokens on /v2, and v2 load/unload changing the registry."""

from __future__ import annotations

import json
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ServerProcess, manage_command, serve_process

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory):
    """A console that demands tokens on /v2, started on an empty var/ (no store yet), seeded from the shell."""
    var_dir = tmp_path_factory.mktemp("v2-console") / "var"
    env = {"INFERA_INFERENCE_AUTH": "token", "INFERA_DISABLE_NVML": "1"}
    with serve_process(var_dir, "--no-seed", env=env) as server:
        manage = manage_command(var_dir, env)

        manage("seed_demo")
        manage("create_user", "client", "--role", "inference")
        yield server, manage("issue_token", "client"), manage("issue_token", "admin")


def simple_inputs() -> list[httpclient.InferInput]:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a), binary_data=True)
    return inputs


def wait_until_ready(client: httpclient.InferenceServerClient, headers: dict, model: str, want: bool) -> None:
    for _ in range(600):
        if client.is_model_ready(model, headers=headers) == want:
            return
        time.sleep(0.05)
    pytest.fail(f"model '{model}' never became {'ready' if want else 'unloaded'}")


def test_it_needs_a_token_for_inference_but_not_for_health(token_server):
    server, key, _ = token_server
    client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
    assert client.is_server_live()
    with pytest.raises(InferenceServerException, match="401|authentication"):
        client.infer("simple", simple_inputs())
    headers = {"Authorization": f"Bearer {key}"}
    wait_until_ready(client, headers, "simple", True)
    result = client.infer("simple", simple_inputs(), headers=headers)
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(1, 17))]


def test_it_refuses_model_changes_from_an_inference_token(token_server):
    server, key, _ = token_server
    client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
    headers = {"Authorization": f"Bearer {key}"}
    with pytest.raises(InferenceServerException, match="role 'inference' may not load or unload models"):
        client.unload_model("simple", headers=headers)
    code = {"file:1/model.py": b"class TritonPythonModel: pass\n"}
    config = '{"backend": "python", "input": [], "output": []}'
    with pytest.raises(InferenceServerException, match="may not load or unload"):
        client.load_model("intruder", headers=headers, config=config, files=code)
    wait_until_ready(client, headers, "simple", True)


def test_it_turns_v2_unload_and_load_into_the_registry_desired_state(token_server):
    server, _, admin_key = token_server
    client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
    headers = {"Authorization": f"Bearer {admin_key}"}
    wait_until_ready(client, headers, "simple", True)
    client.unload_model("simple", headers=headers)
    wait_until_ready(client, headers, "simple", False)
    assert registry_view(server, admin_key, "simple")["versions"] == {1: False}
    client.load_model("simple", headers=headers)
    wait_until_ready(client, headers, "simple", True)
    assert registry_view(server, admin_key, "simple")["versions"] == {1: True}
    assert client.infer("simple", simple_inputs(), headers=headers).as_numpy("OUTPUT1").shape == (1, 16)


def registry_view(server: ServerProcess, key: str, model: str) -> dict:
    """Which versions the registry wants loaded, from its REST API."""
    request = urllib.request.Request(
        f"{server.base_url}/api/models/{model}/versions/", headers={"Authorization": f"Token {key}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        rows = json.load(response)
    rows = rows["results"] if isinstance(rows, dict) else rows
    return {"versions": {row["number"]: row["should_load"] for row in rows}}
