"""The child processes of a local cluster: each in its own process group, its output in a log file, sent SIGTERM by
the kernel if the thread that started it ends first (no orphan if the cluster's process is killed), ended with a
signal and then SIGKILL after a timeout; and the cluster's own redis-server on a free port.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The cluster could not start (a replica exited, nothing answered in time, a tool is missing)."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _tie_to_parent() -> None:
    """In the child before exec: SIGTERM when the thread that started it ends (no orphan if we are killed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(command: list[str], *, env: dict[str, str] | None, log_path: Path, cwd: Path = ROOT) -> subprocess.Popen:
    """Start a child in its own process group, its output appended to `log_path`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log_file:
        log_file.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command[:4])} ...\n".encode())
        log_file.flush()
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=_tie_to_parent,
        )


def end_process(process: subprocess.Popen | None, first: int | None, timeout: float) -> None:
    """Send `first` (None: it was sent already) and wait; SIGKILL what is still there after `timeout` seconds."""
    if process is None or process.poll() is not None:
        return
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(first)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def http_status(url: str, timeout: float = 2.0) -> int:
    """The status a GET of `url` answers; -1 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return -1


@dataclass
class RedisServer:
    """A redis-server of the cluster's own on a free port (tests: isolated from other clusters on the machine)."""

    folder: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise ClusterError("redis-server is missing (Debian's redis-server package)")
        self.folder.mkdir(parents=True, exist_ok=True)
        command = [executable, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.process = spawn(command, env=None, log_path=self.folder / "redis.log", cwd=self.folder)
        deadline = time.monotonic() + 30
        while not self._answers():
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise ClusterError(f"redis-server did not answer on port {self.port}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
        return False

    def stop(self) -> None:
        end_process(self.process, signal.SIGTERM, 10)
        self.process = None


def private_file(path: Path, make: Callable[[], str]) -> None:
    """Write `make()` into `path` (owner only) unless it exists."""
    if path.exists():
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(make() + "\n")


def tail(path: Path, size: int = 4000) -> str:
    return path.read_text(encoding="utf-8", errors="replace")[-size:] if path.exists() else ""
