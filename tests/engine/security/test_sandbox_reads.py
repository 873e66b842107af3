"""A trial load reads only its own version folder and the Python install: not the server's var folder, not another
process's /proc, no Unix socket; the reason it gives back is bounded and printable (issue 32, finding 9)."""

from __future__ import annotations

import base64
import json
import os
import socket
import sqlite3
import unicodedata
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from engine.errors import LoadError
from engine.isolation.confinement import landlock_abi
from engine.isolation.sandbox import MAX_REASON_CHARS, MAX_REASON_LINES
from tests.conftest import ADMIN_PASSWORD, manage_command, serve_process
from tests.engine.backends.test_python import unpacked_environment
from tests.engine.model_factory import make_simple_onnx
from tests.engine.security.test_sandbox import python_model, trial

SECRET = "the-secret-key-of-the-server"

pytestmark = pytest.mark.skipif(landlock_abi() < 1, reason="the kernel has no Landlock")


@pytest.fixture
def var_dir(tmp_path: Path) -> Path:
    """A server's var folder: its secret key, its database and a model store with another model in it."""
    var = tmp_path / "var"
    var.mkdir()
    (var / "secret_key").write_text(SECRET)
    with sqlite3.connect(var / "infera.sqlite3") as database:
        database.execute("create table secrets (value text)")
        database.execute("insert into secrets values (?)", (SECRET,))
    make_simple_onnx(var / "models", name="other")
    return var


def hostile(var_dir: Path, initialize: str, mode: str = "process") -> Path:
    """A python model in the var folder's store whose initialize() runs `initialize` and raises what it got, so
    whatever it read would come back in the failure reason."""
    body = f"try:\n    got = repr(({initialize}))\nexcept Exception as exc:\n    got = repr(exc)\n"
    body += "raise RuntimeError(got)\n"
    version = python_model(var_dir / "models", body)
    if mode == "in_process":
        config = version.parent / "config.pbtxt"
        config.write_text(
            config.read_text() + '\nparameters: { key: "EXECUTION_MODE" value: { string_value: "in_process" } }\n'
        )
    return version


def failure(version: Path) -> str:
    with pytest.raises(LoadError) as caught:
        trial(version)
    return caught.value.reason


@pytest.mark.parametrize("mode", ["process", "in_process"])
@pytest.mark.parametrize("target", ["secret_key", "infera.sqlite3", "models/other/1/model.onnx", "models/other"])
def test_the_child_reads_nothing_of_the_var_folder(var_dir, target, mode):
    path = var_dir / target
    reading = f"os.listdir({str(path)!r})" if path.is_dir() else f"open({str(path)!r}, 'rb').read()"
    reason = failure(hostile(var_dir, reading, mode))
    assert "Permission denied" in reason and SECRET not in reason and "model.onnx" not in reason


def test_the_child_cannot_read_the_servers_environment(var_dir):
    server = os.getpid()  # the process that started the trial, as the server does
    reading = f"[open(f'/proc/{server}/{{name}}', 'rb').read() for name in ('environ', 'cmdline')]"
    reason = failure(hostile(var_dir, reading))
    assert "Permission denied" in reason and "PATH=" not in reason


def test_the_child_cannot_see_other_processes_in_proc(var_dir):
    server = os.getpid()
    reason = failure(hostile(var_dir, f"os.listdir('/proc/{server}'), open('/proc/{server}/status').read()"))
    assert "Permission denied" in reason and "VmRSS" not in reason


def test_the_child_cannot_connect_to_a_unix_socket(var_dir, tmp_path):
    folder = tmp_path / "postgresql"  # as PostgreSQL's /var/run/postgresql/.s.PGSQL.5432: anyone may connect
    folder.mkdir()
    path = folder / ".s.PGSQL.5432"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    path.chmod(0o777)
    listener.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0infera-test-{os.getpid()}")
    abstract.listen()
    try:
        for address in (str(path), f"\0infera-test-{os.getpid()}"):
            connecting = f"socket.socket(socket.AF_UNIX).connect({address!r})"
            assert "Permission denied" in failure(hostile(var_dir, connecting))
        pair = "socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0].sendto(b'x', " + repr(str(path)) + ")"
        assert "Permission denied" in failure(hostile(var_dir, pair))
        for server in (listener, abstract):
            server.setblocking(False)
            with pytest.raises(BlockingIOError):
                server.accept()  # nobody ever connected
    finally:
        listener.close()
        abstract.close()


def test_a_real_postgresql_socket_is_out_of_reach(var_dir):
    sockets = sorted(Path("/var/run/postgresql").glob(".s.PGSQL.*")) if Path("/var/run/postgresql").is_dir() else []
    if not sockets:
        pytest.skip("no PostgreSQL socket on this machine")
    connecting = f"socket.socket(socket.AF_UNIX).connect({str(sockets[0])!r})"
    assert "Permission denied" in failure(hostile(var_dir, connecting))


def test_the_failure_reason_is_bounded_and_printable(var_dir):
    flood = "'\\x1b[2J\\x1b]0;owned\\x07\\u202eevil\\x00' + 'x' * 100_000 + '\\n' * 500 + 'line\\n' * 500"
    version = python_model(var_dir / "models", f"raise RuntimeError({flood})")
    reason = failure(version)
    assert len(reason) <= MAX_REASON_CHARS and len(reason.splitlines()) <= MAX_REASON_LINES
    assert not [c for c in reason if c != "\n" and unicodedata.category(c)[0] == "C"]
    assert "RuntimeError" in reason


def test_a_model_reads_its_own_version_folder(var_dir):
    version = python_model(var_dir / "models", "open(os.path.join(args['model_repository'], '1', 'weights')).read()")
    (version / "weights").write_text("0.5")
    trial(version)


HOSTILE_MODEL = """
import os, socket

found = []
for attempt in (
    lambda: open({secret!r}).read(),
    lambda: open({database!r}, "rb").read(200),
    lambda: open("/proc/{server}/environ", "rb").read(),
    lambda: socket.socket(socket.AF_UNIX).connect("/var/run/postgresql/.s.PGSQL.5432"),
):
    try:
        found.append(repr(attempt()))
    except OSError as exc:
        found.append(type(exc).__name__)
raise RuntimeError(" ".join(found) + "\\x1b[2J" + "x" * 50_000)
"""


@pytest.mark.server
@pytest.mark.slow
def test_a_real_server_trial_loads_a_hostile_upload_in_the_confined_child(tmp_path):
    """Through `manage.py serve` and /v2's repository load, as an admin (python models need one)."""
    var_dir = tmp_path / "var"
    with serve_process(var_dir, "--no-seed", env={"INFERA_DISABLE_NVML": "1"}) as server:
        key = manage_command(var_dir, {})("issue_token", "admin")
        source = HOSTILE_MODEL.format(
            secret=str(var_dir / "secret_key"), database=str(var_dir / "infera.sqlite3"), server=server.process.pid
        )
        config = {"backend": "python", "max_batch_size": 0}
        config |= {"input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}]}
        config |= {"output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}]}
        body = {"config": json.dumps(config), "file:1/model.py": base64.b64encode(source.encode()).decode()}
        request = urllib.request.Request(
            server.base_url + "/v2/repository/models/hostile/load",
            data=json.dumps({"parameters": body}).encode(),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=120)
        answer = refused.value.read().decode()
        secret = (var_dir / "secret_key").read_text().strip()
    assert "PermissionError PermissionError PermissionError PermissionError" in answer, answer[:500]
    assert secret not in answer and ADMIN_PASSWORD not in answer and "\x1b" not in answer
    assert len(answer) < MAX_REASON_CHARS + 500


def test_a_python_model_on_its_own_environment_still_trial_loads(var_dir):
    version = python_model(var_dir / "models", "import numpy")
    unpacked_environment(version.parent / "env")
    config = version.parent / "config.pbtxt"
    extra = 'parameters: { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env" } }'
    config.write_text(config.read_text() + "\n" + extra + "\n")
    trial(version)
