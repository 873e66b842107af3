"""bench.flame: py-spy's collapsed stacks summarised per thread as own and cumulative shares of its samples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.flame import PY_SPY, Recording, busiest_thread, markdown, top_frames

STACKS = """\
thread (1): MainThread;run (runners.py:118);serve (app.py:10);parse (app.py:20) 6
thread (1): MainThread;run (runners.py:118);serve (app.py:10) 2
thread (1): MainThread;run (runners.py:118);walk (tree.py:5);walk (tree.py:5) 2
thread (2): worker;execute (backend.py:3) 30
"""


def test_it_shares_one_threads_samples_by_own_and_cumulative_time() -> None:
    by_own, by_cumulative = top_frames(STACKS, "MainThread")
    own = {f.name: f.own for f in by_own}
    cumulative = {f.name: f.cumulative for f in by_cumulative}
    assert own == {"parse (app.py:20)": 0.6, "serve (app.py:10)": 0.2, "walk (tree.py:5)": 0.2}
    assert cumulative["run (runners.py:118)"] == 1.0
    assert cumulative["serve (app.py:10)"] == 0.8
    assert cumulative["walk (tree.py:5)"] == 0.2  # a recursive frame counts once in a sample
    assert "execute (backend.py:3)" not in cumulative  # another thread's samples


def test_it_finds_the_busiest_thread_and_prints_a_table_per_request() -> None:
    assert busiest_thread(STACKS) == "thread (2): worker"
    by_own, _ = top_frames(STACKS, "MainThread", limit=1)
    assert markdown(by_own, per_request_us=50.0)[2] == "| `parse (app.py:20)` | 60.0% | 60.0% | 30.0 |"


@pytest.mark.skipif(not Path(PY_SPY).exists(), reason="py-spy is installed by requirements.txt")
def test_it_records_a_running_python_process(tmp_path: Path) -> None:
    spinner = "def spin_here():\n    while True:\n        sum(range(1000))\nspin_here()\n"
    child = subprocess.Popen([sys.executable, "-c", spinner])
    try:
        try:
            stacks = Recording(child.pid, 1, tmp_path / "stacks.txt", rate=100).wait()
        except RuntimeError as error:  # ptrace refused where the machine forbids it (not on CI's own machine)
            pytest.skip(str(error))
    finally:
        child.kill()
        child.wait()
    _, by_cumulative = top_frames(stacks, busiest_thread(stacks))
    assert any(f.name.startswith("spin_here ") and f.cumulative > 0.9 for f in by_cumulative)
