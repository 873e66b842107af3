"""`serve --workers N`: N serving processes on one port, each with its own engine, started and stopped by this one.

Each worker is a fresh `manage.py serve --worker K --workers N` (no fork of a process that has loaded torch and
opened the database) named `<replica>-w<K>` (console/peers/identity.py). Each binds the port with SO_REUSEPORT,
so the kernel spreads connections over the workers' own accept queues, and the gRPC port the same way (gRPC sets
SO_REUSEPORT itself). Every worker converges on the registry the way replicas do: change notices, credential
changes and the per-second snapshots travel on the channel layer, Redis when REDIS_URL is set, otherwise
console/peers/layer.py between the workers of this host.

The supervisor holds no engine and no port. The first SIGTERM or SIGINT is passed to every worker, each drains
(shutdown.py), and the supervisor exits 0 once all have; a second signal is passed on too (the workers stop
their model stubs and exit at once) and the supervisor exits with 128 + its number. A worker that dies is started
again, unless it dies within START_GRACE_SECONDS of starting (a wrong setting, a port taken): then the others are
stopped and the supervisor exits with its status. A worker whose supervisor is killed gets SIGTERM from the kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import subprocess  # nosec B404
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from console.config import BASE_DIR, InferaSettings
from console.peers.identity import worker_name

logger = logging.getLogger("console.workers")

START_GRACE_SECONDS = 10.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
PR_SET_PDEATHSIG = 1
LISTEN_BACKLOG = 2048  # uvicorn's default


def reuse_port_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port that the other workers' sockets share (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def check_port_free(host: str, port: int) -> None:
    """Fail early, naming the address, when something that is not one of our workers listens on the port."""
    try:
        probe = reuse_port_socket(host, port)  # a listener without SO_REUSEPORT, or another user's, refuses it
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from None
    probe.close()


def die_with_supervisor() -> None:
    """In a worker: have the kernel send SIGTERM when the supervisor dies (Linux); exit if it has already."""
    supervisor = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if supervisor == 1 or os.getppid() != supervisor:
        sys.exit("the supervisor of this worker has gone")


def run_workers(host: str, port: int, count: int, infera: InferaSettings, options: dict[str, Any]) -> int:
    """Serve with `count` workers (the database is ready) until a signal ends them; the exit status."""
    check_port_free(host, port)
    grpc_port = infera.engine.grpc.port
    if grpc_port:
        check_port_free(host, grpc_port)
    command = [sys.executable, str(BASE_DIR / "manage.py"), "serve", "--host", host, "--port", str(port)]
    command += ["--server", options["server"], "--grpc-port", str(grpc_port), "--no-seed"]
    if options["no_access_log"]:
        command.append("--no-access-log")
    command += ["--access-log-format", infera.access_log_format, "--access-log-sample", str(infera.access_log_sample)]
    command += ["--allow-client-shm", str(infera.engine.shared_memory.allowed).lower()]
    for entry in options.get("trace_config") or []:
        command += ["--trace-config", entry]
    for flag in ("http-restricted-api", "grpc-restricted-protocol"):  # as given: the workers check them again
        for entry in options.get(flag.replace("-", "_")) or []:
            command += [f"--{flag}", entry]
    for flag in ("memory-budget-mb", "gpu-memory-budget"):
        if (value := options.get(flag.replace("-", "_"))) is not None:
            command += [f"--{flag}", str(value)]
    for protocol in ("http", "grpc"):
        if (pattern := options.get(f"{protocol}_header_forward_pattern")) is not None:
            command += [f"--{protocol}-header-forward-pattern", pattern]
    control = infera.engine.model_control
    command += ["--model-control-mode", control.mode, "--repository-poll-secs", str(control.poll_seconds)]
    for name in control.load_models:
        command += ["--load-model", name]
    if control.repository is not None:
        command += ["--model-repository", str(control.repository)]
    return WorkerSupervisor(command, count, infera.replica_name).run()


@dataclass
class Worker:
    index: int
    name: str
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0


class WorkerSupervisor:
    """Starts `count` workers with `command` plus `--worker K --workers N`, passes signals on, restarts the dead."""

    def __init__(self, command: Sequence[str], count: int, replica: str, env: dict[str, str] | None = None) -> None:
        if count < 2:
            raise ValueError(f"a supervisor runs at least 2 workers, got {count}")
        self.command = list(command)
        self.count = count
        self.env = dict(os.environ if env is None else env)
        self.workers = [Worker(k, worker_name(replica, k)) for k in range(count)]
        self.signals: list[int] = []
        self._previous: dict[int, object] = {}

    def run(self) -> int:
        """Run the workers until they have all exited; the supervisor's exit status."""
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._signalled)
        try:
            for worker in self.workers:
                self._start(worker)
            return self._supervise()
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)  # type: ignore[arg-type]

    def _start(self, worker: Worker) -> None:
        # INFERA_WORKERS: a worker's settings know, as Django starts, that it has siblings (the cache they share)
        env = {**self.env, "INFERA_REPLICA_NAME": worker.name, "INFERA_WORKERS": str(self.count)}
        command = [*self.command, "--worker", str(worker.index), "--workers", str(self.count)]
        # a session of its own: a terminal's Ctrl-C reaches the supervisor only, which passes on exactly one signal
        # the command is this interpreter running manage.py serve with fixed arguments (bandit B603)
        worker.process = subprocess.Popen(command, env=env, start_new_session=True)  # nosec B603
        worker.started_at = time.monotonic()
        logger.info("worker %s started (pid %d)", worker.name, worker.process.pid)

    def _supervise(self) -> int:
        failed: int | None = None
        while any(w.process is not None for w in self.workers):
            try:
                pid, status = os.waitpid(-1, 0)  # a signal runs its handler and the wait goes on (PEP 475)
            except ChildProcessError:
                break
            worker = next((w for w in self.workers if w.process is not None and w.process.pid == pid), None)
            if worker is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            worker.process.returncode = code
            worker.process = None
            if self.signals:
                logger.info("worker %s exited with %d", worker.name, code)
                continue
            if time.monotonic() - worker.started_at < START_GRACE_SECONDS:
                logger.error("worker %s exited with %d while starting: stopping the others", worker.name, code)
                failed = code if code != 0 else 1
                self._pass_on(signal.SIGTERM)
                self.signals.append(signal.SIGTERM)
                continue
            logger.warning("worker %s exited with %d: starting it again", worker.name, code)
            self._start(worker)
        if failed is not None:
            return failed if failed > 0 else 128 - failed
        if len(self.signals) > 1:
            return 128 + self.signals[-1]
        return 0

    def _signalled(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        if len(self.signals) == 1:
            print(f"{signal.Signals(sig).name}: draining {self.count} workers", file=sys.stderr, flush=True)
        self._pass_on(sig)

    def _pass_on(self, sig: int) -> None:
        for worker in self.workers:
            if worker.process is not None:
                try:
                    os.kill(worker.process.pid, sig)
                except OSError as exc:
                    if exc.errno != errno.ESRCH:
                        raise
