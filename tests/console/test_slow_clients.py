"""Raw sockets that send half a request and hold it: a real `manage.py serve` (uvicorn and daphne) answers 408,
closes them, and serves everyone else meanwhile. The server runs with 1 s read deadlines to keep the tests short;
tests/console/test_read_deadlines.py covers trickles against a hand clock.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.conftest import ServerProcess, serve_process
from tests.console.live_http import address, ask, connect, read_answer

pytestmark = pytest.mark.server

WAIT_S = 60  # the longest a test reads a held socket before failing: a bound, never a pause
HALF_HEADERS = b"GET /v2/health/live HTTP/1.1\r\nHost: infera\r\nUser-Agent: slow"


@pytest.fixture(scope="module", params=["uvicorn", "daphne"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    var_dir = tmp_path_factory.mktemp(f"slow-clients-{request.param}") / "var"
    env = {
        "INFERA_DISABLE_NVML": "1",
        "INFERA_HTTP_HEADER_TIMEOUT_SECONDS": "1",
        "INFERA_HTTP_BODY_TIMEOUT_SECONDS": "1",
        "INFERA_HTTP_KEEPALIVE_SECONDS": "1",
    }
    with serve_process(var_dir, "--no-seed", "--server", request.param, env=env) as served:
        yield served


def held(server: ServerProcess, sent: bytes) -> socket.socket:
    """A connection that has sent `sent` and sends nothing more."""
    sock = socket.create_connection(address(server), timeout=WAIT_S)
    if sent:
        sock.sendall(sent)
    return sock


def post_head(path: str, length: int, content_type: str = "application/json") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: infera\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_it_closes_a_connection_that_never_sends_a_request(server):
    with held(server, b"") as sock:
        answer = read_answer(sock)
    assert answer is not None and answer.status == 408
    assert answer.json()["error"] == "the request headers did not arrive within 1 s"


def test_it_closes_a_request_whose_headers_stop_halfway(server):
    with held(server, HALF_HEADERS) as sock:
        answer = read_answer(sock)
    assert answer is not None and answer.status == 408 and answer.headers["connection"] == "close"


@pytest.mark.parametrize("path", ["/v2/models/simple/infer", "/accounts/login/"])
def test_it_closes_a_request_whose_body_stops_halfway(server, path):
    with held(server, post_head(path, 400) + b'{"inputs": [') as sock:
        answer = read_answer(sock)
    assert answer is not None and answer.status == 408
    assert answer.json()["error"].startswith("the request body stalled (no data for 1 s")


def test_it_closes_an_idle_keep_alive_connection(server):
    connection = connect(server)
    try:
        assert ask(connection, "GET", "/v2/health/live").status == 200
        assert connection.sock.recv(1) == b""  # the server closed it after the keep-alive time
    finally:
        connection.close()


def test_it_serves_others_while_slow_clients_hold_connections(server):
    slow = [held(server, HALF_HEADERS) for _ in range(20)]
    slow += [held(server, post_head("/v2/models/simple/infer", 400) + b"{") for _ in range(20)]
    try:
        other = connect(server)
        try:
            assert ask(other, "GET", "/v2/health/ready").status == 200
            assert ask(other, "GET", "/accounts/login/").status == 200
        finally:
            other.close()
        answers = [read_answer(sock) for sock in slow]
        assert [answer.status if answer else None for answer in answers] == [408] * len(slow)
    finally:
        for sock in slow:
            sock.close()
