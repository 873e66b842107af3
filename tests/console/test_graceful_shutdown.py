"""SIGTERM to a real `manage.py serve`, under uvicorn and daphne, while a request runs and a dashboard is open.

The running request is a python model held at a gate the test opens (tests/engine/gated_model.py), so every step
waits on an event: the batch starting, the listener refusing, the socket closing, the process exiting.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import psutil
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as websocket_connect

from tests.conftest import ServerProcess, serve_process
from tests.console.live_http import (
    Answer,
    address,
    ask,
    connect,
    grpc_infer,
    infer_gated,
    session_cookie,
    wait_for_pending,
)
from tests.engine.gated_model import GatedModel

pytestmark = pytest.mark.server

T = TypeVar("T")
DEADLINE_S = 60  # a bound on waiting for each event, never a pause


@contextmanager
def gated_server(tmp_path, kind: str) -> Iterator[tuple[ServerProcess, GatedModel]]:
    var_dir = tmp_path / "var"
    gated = GatedModel(tmp_path / "pipes")
    gated.write(var_dir / "models")
    env = {"INFERA_DISABLE_NVML": "1", "INFERA_SECURE_COOKIES": "false", "INFERA_SHUTDOWN_GRACE_SECONDS": "600"}
    try:
        with serve_process(var_dir, "--no-seed", "--server", kind, env=env) as server:
            assert server.wait_for("/v2/models/gated/ready", timeout=DEADLINE_S) == 200, server.log()[-3000:]
            yield server, gated
    finally:
        gated.close()


def in_background(call: Callable[..., T], *args: object) -> Future[T]:
    pool = ThreadPoolExecutor(1)
    try:
        return pool.submit(call, *args)
    finally:
        pool.shutdown(wait=False)


def start_request(server: ServerProcess, gated: GatedModel) -> tuple[Future[Answer], int]:
    """An inference running in the model (its batch has started); its future answer and its stub's pid."""
    answer = in_background(infer_gated, server)
    return answer, gated.wait_started(DEADLINE_S)


def wait_until_refused(server: ServerProcess) -> None:
    """Wait until the server stops taking connections (it has begun to drain)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(address(server), timeout=5).close()
        except ConnectionRefusedError:
            return
        time.sleep(0.05)  # polling for the listener to close, bounded by the deadline
    pytest.fail("the server still accepted connections after SIGTERM")


def children(server: ServerProcess) -> list[psutil.Process]:
    return psutil.Process(server.process.pid).children(recursive=True)


def is_running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(processes: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `processes` still running once each has had DEADLINE_S to end (a SIGKILL takes a moment)."""
    deadline = time.monotonic() + DEADLINE_S
    while (alive := [p for p in processes if is_running(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the process table, bounded by the deadline
    return alive


@contextmanager
def open_dashboard(server: ServerProcess) -> Iterator[ClientConnection]:
    url = server.base_url.replace("http://", "ws://") + "/ws/metrics/"
    cookie = session_cookie(server)
    with websocket_connect(url, origin=server.base_url, additional_headers={"Cookie": cookie}) as dashboard:
        dashboard.recv(timeout=DEADLINE_S)  # the backlog: the dashboard is signed in and streaming
        yield dashboard


def close_code(dashboard: ClientConnection) -> int | None:
    """Read until the server closes the socket; the close code it sent."""
    try:
        while True:
            dashboard.recv(timeout=DEADLINE_S)  # snapshots, one a second, until the close
    except ConnectionClosed as ended:
        return ended.rcvd.code if ended.rcvd is not None else None


@pytest.mark.parametrize("kind", ["uvicorn", "daphne"])
def test_it_drains_in_flight_requests_closes_sockets_unloads_and_exits_0(tmp_path, kind):
    with gated_server(tmp_path, kind) as (server, gated), open_dashboard(server) as dashboard:
        kept = connect(server)
        assert ask(kept, "GET", "/v2/health/ready").status == 200  # a keep-alive connection, open before the signal
        running, stub_pid = start_request(server, gated)
        spawned = children(server)
        assert stub_pid in [p.pid for p in spawned]
        over_grpc = in_background(grpc_infer, server)  # a gRPC call too, queued behind the running batch
        wait_for_pending(server, "gated", 1)

        server.process.send_signal(signal.SIGTERM)
        assert close_code(dashboard) == 1001  # "going away"
        wait_until_refused(server)
        ready = ask(kept, "GET", "/v2/health/ready")  # the balancer's probe on a connection it already has
        assert ready.status == 503 and ready.headers.get("connection") == "close"
        assert not running.done() and server.process.poll() is None  # the request still runs: nothing waits for it

        gated.release(2)
        answer = running.result(timeout=DEADLINE_S)
        assert answer.status == 200 and answer.json()["outputs"][0]["data"] == [7.0]
        assert over_grpc.result(timeout=DEADLINE_S).tolist() == [[7.0]]
        assert server.process.wait(timeout=DEADLINE_S) == 0, server.log()[-3000:]
    assert survivors(spawned) == []
    log = server.log()
    assert "draining" in log and "Traceback" not in log


@pytest.mark.parametrize("kind", ["uvicorn", "daphne"])
def test_a_second_signal_exits_at_once_and_leaves_no_model_process(tmp_path, kind):
    with gated_server(tmp_path, kind) as (server, gated):
        running, _ = start_request(server, gated)
        spawned = children(server)
        server.process.send_signal(signal.SIGTERM)
        wait_until_refused(server)
        assert server.process.poll() is None  # draining: the request holds the shutdown
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=DEADLINE_S) == 128 + signal.SIGTERM
        assert survivors(spawned) == []
        with pytest.raises(OSError):
            running.result(timeout=DEADLINE_S)  # its connection went with the process
