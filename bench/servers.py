"""Server processes under test: start one on a loopback port, wait until it answers, stop it cleanly."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# the same uvicorn flags for Infera and for the echo ceiling, so the two differ only by the app; httptools and
# uvloop come with uvicorn[standard], and a machine without them (the GPU image) falls back to h11 and asyncio
HTTP_IMPL = "httptools" if importlib.util.find_spec("httptools") else "h11"
LOOP_IMPL = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
UVICORN_FLAGS = ["--loop", LOOP_IMPL, "--http", HTTP_IMPL, "--no-access-log", "--log-level", "warning"]


class NotAvailable(Exception):
    """A target that cannot be measured in this tree yet; the message says why."""


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ServerSpec:
    """How to start one server: its command, extra environment, and the URL that says it is ready."""

    name: str
    command: list[str]
    port: int
    ready_path: str = "/v2/health/ready"
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path = ROOT
    ready_timeout_s: float = 120.0
    # models that must answer ready too: a server may call itself ready before its models have loaded
    ready_models: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class ServerProcess:
    """A running server; a context manager that stops it (its whole process group) on exit."""

    def __init__(self, spec: ServerSpec, log_folder: Path) -> None:
        self.spec = spec
        log_folder.mkdir(parents=True, exist_ok=True)
        self.log_path = log_folder / f"{spec.name}.log"
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        env = os.environ | {"PYTHONUNBUFFERED": "1"} | self.spec.env
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.spec.command,
                cwd=self.spec.cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.spec.ready_timeout_s
        self._wait_for_200(self.spec.ready_path, deadline)
        for model in self.spec.ready_models:
            self._wait_for_200(f"/v2/models/{model}/ready", deadline)

    def _wait_for_200(self, path: str, deadline: float) -> None:
        url = self.spec.base_url + path
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NotAvailable(f"{self.spec.name} exited with {self.process.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        raise NotAvailable(
            f"{self.spec.name} not ready at {url} after {self.spec.ready_timeout_s:.0f} s: {self.log_tail()}"
        )

    def log_tail(self, lines: int = 8) -> str:
        """The last lines the server wrote, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def stop(self) -> None:
        """SIGINT (graceful), then SIGKILL to the process group if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)


def uvicorn_command(app: str, port: int) -> list[str]:
    """uvicorn serving `app` (module:attr) on 127.0.0.1:port, one worker."""
    return [PYTHON, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port), *UVICORN_FLAGS]


def daphne_command(app: str, port: int) -> list[str]:
    """daphne serving `app` on 127.0.0.1:port, quiet."""
    return [PYTHON, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "-v", "0", app]


def server_command(server: str, app: str, port: int) -> list[str]:
    if server == "uvicorn":
        return uvicorn_command(app, port)
    if server == "daphne":
        return daphne_command(app, port)
    raise ValueError(f"unknown server '{server}' (uvicorn, daphne)")


def echo_spec(server: str, port: int, echo_dir: Path) -> ServerSpec:
    """The bare ASGI echo app (the HTTP ceiling) under `server`."""
    return ServerSpec(
        f"echo-{server}",
        server_command(server, "bench.echo_app:app", port),
        port,
        env={"BENCH_ECHO_DIR": str(echo_dir)},
    )


def echo_protocol_spec(port: int, echo_dir: Path) -> ServerSpec:
    """The echo answered by uvicorn's protocol itself, past ASGI (bench/echo_protocol.py)."""
    return ServerSpec(
        "echo-protocol",
        [PYTHON, "-m", "bench.echo_protocol", str(port)],
        port,
        env={"BENCH_ECHO_DIR": str(echo_dir)},
    )
