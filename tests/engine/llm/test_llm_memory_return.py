"""What a model's threads freed goes back to the system: glibc keeps no thread arena's top after an unload."""

from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

from engine.serving.memory_return import keep_freed_memory_returnable, release_memory

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallopt"), reason="glibc only"
)
MIB = 2**20


def anonymous_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def test_it_hands_back_what_a_thread_arena_freed_at_its_top():
    keep_freed_memory_returnable()
    # a large block freed raises glibc's dynamic thresholds (trim up to 2 x 30 MiB) unless they are fixed
    torch.ones(30 * MIB, dtype=torch.uint8).sum()
    release_memory()
    before = anonymous_rss_mib()

    def engine_thread() -> None:  # a KV cache: blocks of 2 MiB from the arena of the thread that allocates them
        blocks = [torch.ones(2 * MIB, dtype=torch.uint8) for _ in range(24)]
        del blocks

    thread = threading.Thread(target=engine_thread)
    thread.start()
    thread.join()
    release_memory()
    assert anonymous_rss_mib() - before < 16
