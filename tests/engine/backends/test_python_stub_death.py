"""A python model's stub that dies: the request after the one that killed it runs on a new stub, whatever the
stub's reader thread has noticed by then."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.backends import Device
from engine.backends.python import PythonBackend
from engine.backends.python_process import StubProcess
from engine.errors import BackendError
from tests.engine.backends.python_models import CRASHER
from tests.engine.model_factory import make_python_model, python_config


def run(backend: PythonBackend, value: int) -> int:
    [outputs] = backend.split(backend.execute(backend.prepare([{"X": np.array([[value]], np.int32)}])), [1])
    return int(outputs["PID"][0, 0])


def test_it_runs_the_next_request_on_a_new_stub_before_the_reader_notices(tmp_path, monkeypatch):
    # the reader thread is held until the end: only the asking thread can tell that the stub died
    reader_may_go = threading.Event()
    read = StubProcess._read

    def held_read(stub: StubProcess) -> None:
        reader_may_go.wait(30)
        read(stub)

    monkeypatch.setattr(StubProcess, "_read", held_read)
    config = python_config("crasher", [("X", "TYPE_INT32", [1])], [("PID", "TYPE_INT64", [1])])
    backend = PythonBackend(config, make_python_model(tmp_path, "crasher", CRASHER, config) / "1", Device())
    backend.load()
    try:
        first = run(backend, 1)
        with pytest.raises(BackendError, match="stub process exited with code 1 while running this request"):
            run(backend, 13)
        again = run(backend, 1)
        assert again != first
        assert backend.restarts == 1
    finally:
        reader_may_go.set()
        backend.unload()
