"""The supervisor of `serve --workers`: names, signals passed on once each, a dead worker started again, a worker
failing at start stopping the rest. The workers here are small scripts, so each case takes a moment."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

DEADLINE_S = 30

WORKER = textwrap.dedent(
    """
    import os, pathlib, signal, sys
    folder, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
    index = sys.argv[sys.argv.index("--worker") + 1]
    if mode == "fail" and index == "1":
        while not list(folder.glob("w0-*")):  # fails once worker 0 is up, so that there is one to stop
            signal.sigtimedwait([], 0.01)
        sys.exit(3)
    signals = []
    def handle(sig, frame):  # a draining worker: the first signal starts the drain, a second ends it at once
        signals.append(sig)
        if mode != "drain-long" or len(signals) > 1:
            sys.exit(0 if len(signals) == 1 else 128 + sig)
    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    (folder / f"w{index}-{os.getpid()}").write_text(os.environ["INFERA_REPLICA_NAME"])
    while True:
        signal.pause()
    """
)

SUPERVISOR = textwrap.dedent(
    """
    import sys
    import console.hosting.workers as workers
    workers.START_GRACE_SECONDS = float(sys.argv[3])
    command = [sys.executable, sys.argv[4], sys.argv[1], sys.argv[2]]
    sys.exit(workers.WorkerSupervisor(command, 2, "box").run())
    """
)


def supervise(tmp_path: Path, mode: str, grace: float = 10.0) -> subprocess.Popen[bytes]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(tmp_path), mode, str(grace), str(script)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def started(folder: Path, count: int) -> dict[str, int]:
    """Until `count` workers have started (in all), each worker's name and its newest pid."""
    deadline = time.monotonic() + DEADLINE_S
    while len(files := sorted(folder.glob("w*-*"), key=lambda f: f.stat().st_mtime_ns)) < count:
        assert time.monotonic() < deadline, f"{len(files)} of {count} workers started"
        time.sleep(0.02)  # polling for other processes, bounded by the deadline
    return {f.read_text(): int(f.name.split("-")[1]) for f in files}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_it_names_the_workers_and_passes_one_sigterm_to_each(tmp_path):
    supervisor = supervise(tmp_path, "plain")
    workers = started(tmp_path, 2)
    assert sorted(workers) == ["box-w0", "box-w1"]
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=DEADLINE_S) == 0
    assert not any(alive(pid) for pid in workers.values())


def test_it_starts_a_worker_that_died_again(tmp_path):
    supervisor = supervise(tmp_path, "plain", grace=0.0)
    first = started(tmp_path, 2)
    os.kill(first["box-w0"], signal.SIGKILL)
    again = started(tmp_path, 3)
    assert again["box-w0"] != first["box-w0"] and again["box-w1"] == first["box-w1"]
    supervisor.send_signal(signal.SIGINT)
    assert supervisor.wait(timeout=DEADLINE_S) == 0


def test_a_worker_failing_at_start_stops_the_others(tmp_path):
    supervisor = supervise(tmp_path, "fail")
    assert supervisor.wait(timeout=DEADLINE_S) == 3
    (survivor,) = started(tmp_path, 1).values()
    assert not alive(survivor)


def test_a_second_signal_is_passed_on_and_ends_the_drain(tmp_path):
    supervisor = supervise(tmp_path, "drain-long")
    workers = started(tmp_path, 2)
    supervisor.send_signal(signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        supervisor.wait(timeout=0.5)  # the workers drain: nothing ends them yet (the wait bounds the check)
    supervisor.send_signal(signal.SIGTERM)
    assert supervisor.wait(timeout=DEADLINE_S) == 128 + signal.SIGTERM
    assert not any(alive(pid) for pid in workers.values())
