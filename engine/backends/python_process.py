"""The server's handle on one python model stub process: start it, ask it, relay what it asks, notice it die.

The stub is a fresh interpreter (`python -I -B`, or the model's EXECUTION_ENV_PATH interpreter) with an environment
built from an allow-list (no token, no cache folder of the server's, a HOME of its own that goes with it); it
inherits one end of a socketpair and two memfd regions and nothing else, and gives up every capability as it
boots, so a stub of a root server cannot read the server's /proc/<pid>/environ or memory.
One reader thread per stub takes its messages: answers to what the server asked, and BLS calls, metric updates
and log lines from model code, which go to the instance's EngineModelHost.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess  # nosec B404
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engine.backends.python_channel import Channel, ChannelClosed, Exchange, Region
from engine.backends.python_host import EngineModelHost
from engine.errors import InferaError
from engine.types import ModelCall, ModelCallResult

log = logging.getLogger("infera.engine")

PROJECT_ROOT = Path(__file__).resolve().parent.parent.parent
# the engine package is imported from its own folder, the project's is never on sys.path: a stub started by a
# trial load in the sandbox may read the engine's folder, not the project's (which may hold the var folder)
_BOOT = (
    "import importlib.util as u, sys; "
    "s = u.spec_from_file_location('engine', sys.argv[1] + '/engine/__init__.py', "
    "submodule_search_locations=[sys.argv[1] + '/engine']); "
    "sys.modules['engine'] = e = u.module_from_spec(s); s.loader.exec_module(e); "
    "from engine.isolation.confinement import drop_capabilities; drop_capabilities(); "
    "from engine.backends.python_stub import main; sys.exit(main(sys.argv[2:]))"
)
# what a stub sees of the server's environment: an allow-list of what runtimes need, never what could hold a secret
PASSED_VARIABLES = (
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
)
PASSED_PREFIXES = ("LC_", "CUDA_")
# a name like these never passes, whatever its prefix (CUDA_..._TOKEN)
SECRET_WORDS = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.IGNORECASE)


class StubDied(Exception):
    """The stub process exited or closed its link; `reason` says how."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def stub_environment(device_kind: str, device_id: int) -> dict[str, str]:
    """A stub's environment, built from the allow-list; its HOME (a folder of its own) is added when it starts."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if (key in PASSED_VARIABLES or key.startswith(PASSED_PREFIXES)) and not SECRET_WORDS.search(key)
    }
    environment["PYTHONDONTWRITEBYTECODE"] = "1"
    if device_kind == "GPU":
        environment["INFERA_INSTANCE_GPU"] = str(device_id)
    return environment


class StubProcess:
    """One running stub; `on_death` is called once (from the reader thread) when it dies unasked."""

    def __init__(
        self,
        label: str,
        host: EngineModelHost,
        *,
        interpreter: str = sys.executable,
        environment: dict[str, str] | None = None,
        cwd: Path | None = None,
        on_death: Callable[[str], None] | None = None,
    ) -> None:
        self.label = label
        self.host = host
        self.interpreter = interpreter
        self.environment = environment if environment is not None else stub_environment("CPU", 0)
        self.cwd = cwd
        self.on_death = on_death
        self.home: Path | None = None  # the stub's HOME, made when it starts, removed once it has ended
        self.process: subprocess.Popen | None = None
        self.channel: Channel | None = None
        self.closing = False
        self.dead: str | None = None
        self.exchange: Exchange | None = None
        self._reader: threading.Thread | None = None
        self._bls_streams: dict[int, Callable[[], None]] = {}  # the stub's streamed BLS calls: what cancels each
        self._bls_lock = threading.Lock()

    def start(self) -> None:
        self.home = Path(tempfile.mkdtemp(prefix=f"infera-stub-{self.label}-"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        to_stub = Region.create(f"infera-{self.label}-in")
        to_server = Region.create(f"infera-{self.label}-out")
        fds = (theirs.fileno(), to_server.fd, to_stub.fd)
        try:
            # bandit B603: our own interpreter (or the model's configured one) on our own module, never a shell
            self.process = subprocess.Popen(  # nosec B603
                [self.interpreter, "-I", "-B", "-c", _BOOT, str(PROJECT_ROOT), *map(str, fds)],
                pass_fds=fds,
                env=dict(self.environment, HOME=str(self.home)),
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a signal to the server's group does not reach model code first
            )
        except OSError as exc:
            ours.close()
            to_stub.close()
            to_server.close()
            self._remove_home()
            raise StubDied(f"the stub process could not start: {exc}") from exc
        finally:
            theirs.close()
        # the server's copy of the stub's outgoing region is only read
        self.channel = Channel(ours, to_stub, to_server)
        # the handler never waits on the link: messages are handled in the order they came (a stream's responses)
        self.exchange = Exchange(self.channel, self._handle, in_order=True)
        self._reader = threading.Thread(target=self._read, name=f"infera-stub-{self.label}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def ask(
        self, header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = (), timeout: float | None = None
    ) -> tuple[dict[str, Any], list[np.ndarray]]:
        """Send a request to the stub and wait for its answer (reading the link meanwhile, so the answer needs no
        hop through the reader thread); StubDied or TimeoutError otherwise."""
        exchange = self.exchange
        if self.dead is not None or exchange is None:
            raise StubDied(self.dead or "the stub process is not running")
        try:
            return exchange.ask(header, arrays, timeout)
        except ChannelClosed:
            # noted here, not only by the reader thread: the next request must not be sent to this stub
            self.dead = self.dead or self.exit_reason()
            raise StubDied(self.dead) from None

    def kill(self, *, wait: bool = True) -> None:
        """End the stub now (a request ran past its deadline, or the server is unloading it); `wait=False` only
        sends the signal (from a signal handler, or where the caller cannot block)."""
        self.closing = True
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, 9)
            except OSError:
                self.process.kill()
        if wait:
            self.wait()

    def wait(self, timeout: float = 10.0) -> None:
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout)
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.process is not None and self.process.poll() is not None:
            self._remove_home()

    def _remove_home(self) -> None:
        home, self.home = self.home, None
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)

    def exit_reason(self) -> str:
        code = self.process.poll() if self.process is not None else None
        if code is None and self.process is not None:
            try:
                code = self.process.wait(2)
            except subprocess.TimeoutExpired:
                return "its stub process closed the link"
        if code is not None and code < 0:
            return f"its stub process was killed by signal {-code}"
        return f"its stub process exited with code {code}"

    def _read(self) -> None:
        """The reader thread: read while nobody asks; when the link ends, note why and report the death once."""
        if self.exchange is not None:
            self.exchange.serve()
        reason = self.exit_reason()
        self.dead = reason
        if self.process is not None and self.process.poll() is not None:
            self._remove_home()
        if not self.closing and self.on_death is not None:
            self.on_death(reason)

    def _handle(self, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        op = header.get("op")
        if op == "call":
            self._relay_call(header, arrays)
        elif op == "call_cancel":
            cancel = self._bls_streams.get(int(header["call"]))
            if cancel is not None:
                cancel()
        elif op == "metric_update":
            self._quietly(
                self.host.update, header["name"], header["labels"], header["action"], header["value"], header["buckets"]
            )
        elif op == "metric_declare":
            error = self._quietly(self.host.declare, header["name"], header["description"], header["kind"])
            self._answer(header, {"error": error or ""})
        elif op == "metric_value":
            try:
                answer = {"value": self.host.value(header["name"], header["labels"])}
            except InferaError as exc:
                answer = {"error": exc.message}
            self._answer(header, answer)
        elif op == "metric_release":
            self.host.release(header["name"])
        elif op == "log":
            self.host.log(int(header.get("level", logging.INFO)), str(header.get("message", "")))
        elif op == "response":
            response = None
            if "outputs" in header:
                outputs = dict(zip(header["outputs"], arrays, strict=True))
                response = ModelCallResult(outputs, header.get("error", ""), int(header.get("code", 0)))
            self.host.respond(int(header["stream"]), response, bool(header.get("final")))
        else:
            log.warning("model stub %s sent an unknown message '%s'", self.label, op)

    def _relay_call(self, header: dict[str, Any], arrays: list[np.ndarray]) -> None:
        spec = header["call"]
        call = ModelCall(
            model_name=str(spec["model_name"]),
            inputs=dict(zip(spec["inputs"], arrays, strict=True)),
            model_version=int(spec.get("model_version", -1)),
            requested_outputs=list(spec.get("requested_outputs", [])),
            parameters=dict(spec.get("parameters", {})),
            request_id=str(spec.get("request_id", "")),
            correlation_id=spec.get("correlation_id", 0),
            flags=int(spec.get("flags", 0)),
            timeout_us=int(spec.get("timeout_us", 0)),
        )
        if spec.get("decoupled"):  # exec(decoupled=True): an answer per response, the last marked final
            self._relay_stream(header, call)
            return
        self.host.call(call).add_done_callback(lambda done: self._answer_call(header, done.result()))

    def _relay_stream(self, question: dict[str, Any], call: ModelCall) -> None:
        number = int(question["id"])
        ended = False

        def deliver(result: ModelCallResult, last: bool) -> None:  # on the engine's loop
            nonlocal ended
            if last:
                with self._bls_lock:
                    ended = True
                    self._bls_streams.pop(number, None)
            entry = {"outputs": list(result.outputs), "error": result.error, "code": result.code}
            self._answer(question, {"results": [entry], "final": last}, list(result.outputs.values()))

        cancel = self.host.open_stream(call, deliver)
        with self._bls_lock:  # the call may have ended already: nothing left to cancel then
            if not ended:
                self._bls_streams[number] = cancel

    def _answer_call(self, question: dict[str, Any], results: list[ModelCallResult]) -> None:
        arrays: list[np.ndarray] = []
        entries = []
        for result in results:
            entries.append({"outputs": list(result.outputs), "error": result.error, "code": result.code})
            arrays += list(result.outputs.values())
        self._answer(question, {"results": entries}, arrays)

    def _answer(
        self, question: dict[str, Any], header: dict[str, Any], arrays: list[np.ndarray] | tuple[()] = ()
    ) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        try:
            exchange.answer(question, header, arrays)
        except ChannelClosed:
            pass  # the stub is gone; the reader reports it

    def _quietly(self, fn: Callable[..., Any], *args: Any) -> str | None:
        try:
            fn(*args)
        except InferaError as exc:
            log.warning("model stub %s: %s", self.label, exc.message)
            return exc.message
        return None
