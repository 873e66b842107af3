"""A process's footprint read from /proc: memory, threads, fds, and children that have exited but not been reaped."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.footprint import child_pids, footprint


def test_it_reads_memory_threads_and_open_fds_of_this_process(tmp_path):
    # threads that earlier tests left behind may end meanwhile: a reading counts only when nothing else changed
    for _ in range(20):
        before = footprint(os.getpid())
        release = threading.Event()
        worker = threading.Thread(target=release.wait)
        worker.start()
        with open(tmp_path / "held", "w"):
            during = footprint(os.getpid())
        release.set()
        worker.join()
        after = footprint(os.getpid())
        if (after.threads, after.fds) == (before.threads, before.fds):
            break
    assert before.rss_kb > 0
    assert during.threads == before.threads + 1
    assert during.fds == before.fds + 1


def test_it_counts_a_child_that_exited_until_it_is_reaped():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the child never exited"
        time.sleep(0.01)
    assert child.pid in child_pids(os.getpid())
    assert footprint(os.getpid()).children >= 1
    child.wait()
    assert child.pid not in child_pids(os.getpid())
