"""Redis (the channel layer) goes away under a serving process: no request fails, changes still converge through
the periodic reconcile, the metrics stream drops its sockets and serves new ones once Redis is back."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.http as httpclient
import websockets

from deploy.processes import RedisServer
from tests.conftest import ServerProcess, api_call, manage_command, serve_process, signed_in_opener

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def redis_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, RedisServer, str]]:
    redis = RedisServer(tmp_path_factory.mktemp("redis"))
    redis.start()
    var_dir = tmp_path_factory.mktemp("redis-outage") / "var"
    env = {
        "REDIS_URL": redis.url,
        "INFERA_SECRET_KEY": "redis-outage-test-secret-key-not-for-production",  # required with REDIS_URL
        "INFERA_RECONCILE_SECONDS": "1",
        "INFERA_DISABLE_NVML": "1",
        "INFERA_SECURE_COOKIES": "0",
    }
    try:
        with serve_process(var_dir, env=env) as server:
            yield server, redis, manage_command(var_dir, env)("issue_token", "admin")
    finally:
        redis.stop()


def add_sub(client: httpclient.InferenceServerClient) -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return client.infer("simple", inputs).as_numpy("OUTPUT0")


def wait_for_ready(client: httpclient.InferenceServerClient, model: str, want: bool, version: str = "") -> None:
    deadline = time.monotonic() + 60
    while client.is_model_ready(model, version) != want:
        assert time.monotonic() < deadline, f"model '{model}' never became {'ready' if want else 'unloaded'}"
        time.sleep(0.05)


async def first_snapshot(server: ServerProcess, cookie: str) -> str:
    """The first message a new /ws/metrics/ socket gets after its backlog, or why it was closed."""
    url = server.base_url.replace("http://", "ws://") + "/ws/metrics/"
    headers = {"Cookie": cookie, "Origin": server.base_url}
    try:
        async with websockets.connect(url, additional_headers=headers, open_timeout=10) as socket:
            await asyncio.wait_for(socket.recv(), 10)  # the backlog
            return await asyncio.wait_for(socket.recv(), 10)
    except websockets.ConnectionClosed as closed:
        return f"closed {closed.rcvd.code if closed.rcvd else None}"


def session_cookie(server: ServerProcess) -> str:
    opener = signed_in_opener(server)
    jar = next(handler.cookiejar for handler in opener.handlers if hasattr(handler, "cookiejar"))
    return "; ".join(f"{cookie.name}={cookie.value}" for cookie in jar)


def test_it_serves_and_converges_without_redis_and_streams_again_when_it_returns(redis_served):
    server, redis, admin_key = redis_served
    client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
    wait_for_ready(client, "simple", True)
    # started whole (every seeded model loaded after simple): the sampler streams from then on
    assert server.wait_for("/v2/health/ready", timeout=300) == 200
    cookie = session_cookie(server)
    assert '"type":"snapshot"' in asyncio.run(first_snapshot(server, cookie))
    expected = add_sub(client)
    _, _, body = api_call(server, "/api/models/digits/", admin_key)
    spare = str(3 - json.loads(body)["active_version"])  # digits has versions 1 and 2: the one not active
    wait_for_ready(client, "digits", True, spare)

    redis.stop()
    for _ in range(50):
        assert (add_sub(client) == expected).all()
    # the change message cannot be sent; the periodic reconcile still converges on it
    status, _, body = api_call(server, f"/api/models/digits/versions/{spare}/unload", admin_key, method="POST")
    assert status == 202, body
    wait_for_ready(client, "digits", False, spare)
    assert not asyncio.run(first_snapshot(server, cookie)).startswith('{"type":"snapshot"')
    assert client.is_server_ready()
    # Redis stays down until the publisher has met the outage: it publishes once a second, and the steps above can
    # take less than that now that the access log is written off the loop
    deadline = time.monotonic() + 30
    while "the channel layer (live metrics) is unavailable" not in server.log():
        assert time.monotonic() < deadline, "the live metrics publisher never met the outage"
        time.sleep(0.05)  # polling the log of a server process

    redis.start()
    status, _, body = api_call(server, f"/api/models/digits/versions/{spare}/load", admin_key, method="POST")
    assert status == 202, body
    wait_for_ready(client, "digits", True, spare)
    assert (add_sub(client) == expected).all()
    deadline = time.monotonic() + 60
    while '"type":"snapshot"' not in asyncio.run(first_snapshot(server, cookie)):
        assert time.monotonic() < deadline, "the metrics stream never came back after Redis did"
    # the log writer thread writes a line up to 20 ms after it was logged: the stream may come back before it
    deadline = time.monotonic() + 30
    while "the channel layer (live metrics) is back" not in (log := server.log()):
        assert time.monotonic() < deadline, "the end of the outage was never logged"
        time.sleep(0.05)  # polling the log of a server process
    assert log.count("the channel layer (live metrics) is unavailable") == 1  # once per outage, not per second
    assert "could not announce the change of model 'digits'" in log
