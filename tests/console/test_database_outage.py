"""PostgreSQL goes away under a serving process: /v2 keeps answering, the console says 503, all converge after.

The server reaches PostgreSQL through a TCP proxy the test cuts (connections reset, new ones refused) and restores,
which is what a database restart or a network partition looks like from the serving process.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import ServerProcess, api_call, manage_command, serve_process, signed_in_opener
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.server

POSTGRES = ("127.0.0.1", 5432)


@dataclass
class OutageServer:
    server: ServerProcess
    proxy: TcpProxy
    seen_key: str  # used before the outage
    unseen_key: str  # never used before the outage
    admin_key: str

    @contextmanager
    def database_down(self) -> Iterator[None]:
        self.proxy.cut()
        try:
            yield
        finally:
            self.proxy.restore()


def admin_connection(database: str = "postgres"):
    import psycopg

    try:
        return psycopg.connect(host=POSTGRES[0], port=POSTGRES[1], user="postgres", dbname=database, autocommit=True)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not running on 127.0.0.1:5432: {exc}")
        pytest.skip(f"PostgreSQL is not running on 127.0.0.1:5432: {exc}")


@pytest.fixture(scope="module")
def outage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OutageServer]:
    database = f"infera_outage_{os.getpid()}"
    with admin_connection() as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{database}"')
    proxy = TcpProxy(POSTGRES).start()
    var_dir = tmp_path_factory.mktemp("outage") / "var"
    env = {
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{proxy.port}/{database}",
        "INFERA_INFERENCE_AUTH": "token",
        "INFERA_TOKEN_CHECK_SECONDS": "0",  # every request asks the database, so the outage path is taken at once
        "INFERA_RECONCILE_SECONDS": "1",
        "INFERA_DISABLE_NVML": "1",
        "INFERA_SECURE_COOKIES": "0",  # the test signs in over plain http with urllib's cookie jar
    }
    try:
        with serve_process(var_dir, "--no-seed", env=env) as server:
            # the shell talks to PostgreSQL directly: only the serving process is behind the proxy
            direct = f"postgres://postgres@127.0.0.1:{POSTGRES[1]}/{database}"
            manage = manage_command(var_dir, {**env, "DATABASE_URL": direct})

            manage("seed_demo")
            manage("create_user", "client", "--role", "inference")
            yield OutageServer(
                server,
                proxy,
                manage("issue_token", "client"),
                manage("issue_token", "client"),
                manage("issue_token", "admin"),
            )
    finally:
        proxy.cut()
        with admin_connection() as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def client_of(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def add_sub(client: httpclient.InferenceServerClient, key: str) -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return client.infer("simple", inputs, headers=bearer(key)).as_numpy("OUTPUT0")


def wait_until_ready(client: httpclient.InferenceServerClient, key: str, model: str, want: bool = True) -> None:
    for _ in range(1200):
        if client.is_model_ready(model, headers=bearer(key)) == want:
            return
        time.sleep(0.05)
    pytest.fail(f"model '{model}' never became {'ready' if want else 'unloaded'}")


def test_it_keeps_serving_inference_to_recently_seen_tokens_while_the_database_is_down(outage: OutageServer):
    client = client_of(outage.server)
    wait_until_ready(client, outage.admin_key, "simple")
    expected = add_sub(client, outage.seen_key)
    with outage.database_down():
        for _ in range(20):
            assert (add_sub(client, outage.seen_key) == expected).all()
        assert client.is_server_ready() and client.is_model_ready("simple", headers=bearer(outage.seen_key))
        with pytest.raises(InferenceServerException) as refused:
            add_sub(client, outage.unseen_key)
        assert refused.value.status() == "503"
        assert "cannot check the API token: the database is unavailable" in refused.value.message()
    assert (add_sub(client, outage.unseen_key) == expected).all()  # checked once the database is back


def test_it_answers_the_console_and_its_api_with_503_while_the_database_is_down(outage: OutageServer):
    opener = signed_in_opener(outage.server)
    assert opener.open(outage.server.base_url + "/models/", timeout=15).status == 200
    with outage.database_down():
        with pytest.raises(urllib.error.HTTPError) as page:
            opener.open(outage.server.base_url + "/models/", timeout=15)
        text = page.value.read().decode()
        assert page.value.code == 503 and "The database is unavailable" in text and "Traceback" not in text
        status, headers, body = api_call(outage.server, "/api/models/", outage.admin_key)
        assert status == 503 and headers["retry-after"].isdigit()
        assert json.loads(body)["code"] == "database_unavailable"
    status, _, body = api_call(outage.server, "/api/models/", outage.admin_key)
    assert status == 200 and b"simple" in body


def test_it_refuses_model_changes_during_the_outage_and_takes_them_after(outage: OutageServer):
    client = client_of(outage.server)
    admin = bearer(outage.admin_key)
    wait_until_ready(client, outage.admin_key, "simple")
    with outage.database_down():
        with pytest.raises(InferenceServerException) as refused:
            client.unload_model("simple", headers=admin)
        assert refused.value.status() == "503"
        assert "cannot unload model 'simple': the database is unavailable" in refused.value.message()
        assert client.is_model_ready("simple", headers=admin)  # nothing changed
    client.unload_model("simple", headers=admin)
    wait_until_ready(client, outage.admin_key, "simple", want=False)
    client.load_model("simple", headers=admin)
    wait_until_ready(client, outage.admin_key, "simple")
