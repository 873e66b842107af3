"""A real `manage.py serve` under uvicorn and under daphne: hostile requests are answered before their bodies."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import Iterator

import orjson
import pytest

from tests.conftest import ServerProcess, serve_process

pytestmark = pytest.mark.server


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    var_dir = tmp_path_factory.mktemp(f"hostile-{request.param}") / "var"
    with serve_process(var_dir, "--no-seed", "--server", request.param, env={"INFERA_DISABLE_NVML": "1"}) as served:
        yield served


def raw_post(server: ServerProcess, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, bytes]:
    """Send only the headers (and `body`, if any) of a POST; (status, body) of the answer, without sending the rest."""
    host, port = server.base_url.removeprefix("http://").split(":")
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < _length(answer):
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, rest = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), rest


def _length(answer: bytes) -> int:
    for line in answer.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_a_ten_gib_declared_body_is_answered_at_once(server):
    for path in ("/api/models/m/versions/", "/accounts/login/", "/v2/models/simple/infer"):
        status, body = raw_post(server, path, {"Content-Length": str(10 * 2**30), "Content-Type": "text/plain"})
        assert status == 413, (path, body)


def test_an_openai_body_over_its_own_limit_is_answered_at_once(server):
    # 10 MB is under /v2's 64 MB limit but over /v1's 4 MiB: an 11 MB stop list once stalled the loop parsing it
    status, body = raw_post(
        server, "/v1/completions", {"Content-Length": str(10 * 2**20), "Content-Type": "application/json"}
    )
    assert status == 413 and b"limit of 4194304 bytes" in body, body


def test_an_anonymous_upload_is_refused_before_its_body(server):
    status, body = raw_post(server, "/api/models/m/versions/", {"Content-Length": str(300 * 2**20)})
    assert status == 401 and b"sign in or send an API token" in body


def test_a_drive_by_load_from_another_site_is_refused(server):
    code = base64.b64encode(b"import os\nos.mkdir('/tmp/infera-drive-by')\n").decode()
    body = orjson.dumps({"parameters": {"file:1/model.py": code, "config": '{"backend": "python"}'}})
    headers = {"Content-Length": str(len(body)), "Content-Type": "text/plain", "Origin": "http://evil.example"}
    status, answer = raw_post(server, "/v2/repository/models/x/load", headers, body)
    assert status == 403 and b"cross-site request refused" in answer
    headers = {"Content-Length": str(len(body)), "Content-Type": "application/json"}
    status, answer = raw_post(server, "/v2/repository/models/x/load", headers, body)
    assert status == 403 and b"needs an API token" in answer  # loopback is open for inference, not for loads


def test_a_dashboard_socket_from_another_port_is_refused(server):
    import websockets

    url = server.base_url.replace("http://", "ws://") + "/ws/metrics/"
    other_port = server.base_url.rsplit(":", 1)[0] + ":1"

    async def connect(origin: str) -> int | None:
        try:
            async with websockets.connect(url, origin=origin) as socket_:
                await socket_.wait_closed()
                return socket_.close_code  # accepted, then closed for want of a sign-in
        except websockets.exceptions.InvalidStatus as refused:
            return refused.response.status_code

    assert asyncio.run(connect(other_port)) == 403
    assert asyncio.run(connect(server.base_url)) == 4401
