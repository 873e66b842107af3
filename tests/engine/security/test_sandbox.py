"""Trial loads run in a confined child: no network, no writes outside its own folder, bounded time and memory."""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path

import pytest

from engine.errors import LoadError
from engine.serving.admission import SYSTEM, admit
from engine.settings import EngineSettings, SandboxSettings
from tests.engine.model_factory import make_python_model, make_simple_onnx, python_config

ONE_IN_ONE_OUT = python_config("m", [("INPUT0", "TYPE_FP32", [1])], [("OUTPUT0", "TYPE_FP32", [1])])


def python_model(repo: Path, initialize: str) -> Path:
    source = textwrap.dedent(
        """
        import os, socket, sys, time


        class TritonPythonModel:
            def initialize(self, args):
        {body}

            def execute(self, requests):
                return []
        """
    ).format(body=textwrap.indent(textwrap.dedent(initialize), " " * 8))
    return make_python_model(repo, "m", source, ONE_IN_ONE_OUT) / "1"


def trial(version_dir: Path, **sandbox) -> None:
    settings = EngineSettings(sandbox=SandboxSettings(**sandbox)) if sandbox else EngineSettings()
    admit("m", version_dir, None, caller=SYSTEM, settings=settings)


def test_it_admits_a_good_model_with_its_completed_config(tmp_path):
    version = make_simple_onnx(tmp_path, name="simple", write_config=False) / "1"
    config = admit("simple", version, None, caller=SYSTEM, settings=EngineSettings())
    assert config.max_batch_size == 4 and [t.name for t in config.input] == ["INPUT0", "INPUT1"]


def test_the_child_cannot_write_outside_its_own_folder(tmp_path):
    target = tmp_path / "written-by-the-model"
    with pytest.raises(LoadError, match="Permission denied"):
        trial(python_model(tmp_path / "repo", f"open({str(target)!r}, 'w').write('x')"))
    assert not target.exists()


def test_the_child_reaches_no_network(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        with pytest.raises(LoadError, match="unreachable|Permission denied|refused"):
            trial(python_model(tmp_path / "repo", f"socket.create_connection(('127.0.0.1', {port}), timeout=5)"))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected
    finally:
        listener.close()


def test_the_child_sees_no_secret_of_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERA_SECRET_KEY", "do-not-leak")
    monkeypatch.setenv("DATABASE_URL", "postgres://user:pw@db/x")
    check = "assert 'INFERA_SECRET_KEY' not in os.environ and 'DATABASE_URL' not in os.environ, dict(os.environ)"
    trial(python_model(tmp_path / "repo", check))


def test_a_trial_past_its_time_is_stopped(tmp_path):
    with pytest.raises(LoadError, match="longer than 2 s"):
        trial(python_model(tmp_path / "repo", "time.sleep(60)"), timeout_seconds=2)


def test_a_trial_past_its_memory_is_refused(tmp_path):
    with pytest.raises(LoadError, match="memory|MemoryError"):
        trial(python_model(tmp_path / "repo", "blob = bytearray(2 * 1024 ** 3)"), memory_mb=1024)


def test_a_trial_that_kills_its_process_is_a_load_failure(tmp_path):
    with pytest.raises(LoadError, match="crashed \\(SIGSEGV\\)|exit status 3|exited with code 3"):
        trial(python_model(tmp_path / "repo", "os._exit(3)"))
