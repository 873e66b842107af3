"""Freed memory handed back to the system after an unload: reference cycles collected, torch's CUDA cache emptied,
glibc's arenas trimmed, and glibc's thresholds fixed so that a thread's arena can give back its top."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from collections.abc import Callable

# glibc's mallopt parameters and the values keep_freed_memory_returnable sets
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
ARENA_MMAP_THRESHOLD = 32 * 2**20
ARENA_TRIM_THRESHOLD = 8 * 2**20


def release_memory() -> None:
    """Give freed memory back after an unload: collect cycles, empty torch's caching allocator, trim glibc's
    arenas (their freed pages would otherwise stay in the RSS)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _load_malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_malloc_trim = _load_malloc_trim()


def keep_freed_memory_returnable() -> None:
    """Fix glibc's mmap and trim thresholds (ARENA_MMAP_THRESHOLD, ARENA_TRIM_THRESHOLD), so that a thread's arena
    hands back what an unloaded model freed at its top.

    By default glibc raises both as large blocks are freed (the trim threshold up to 64 MiB), and `malloc_trim`
    releases free pages inside an arena but never the top of a thread's arena: 24 blocks of 2 MiB (a KV cache's
    layers) freed by the thread that allocated them stayed in the RSS, +46 MiB after `release_memory`, +0.2
    with the thresholds fixed. The mmap threshold sits at glibc's own dynamic ceiling, so tensors under 32 MiB stay
    in the arenas (a per-step tensor mapped and unmapped each time would fault its pages in again). Process-wide
    and idempotent; nothing where the C library is not glibc."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, ARENA_MMAP_THRESHOLD)
    mallopt(_M_TRIM_THRESHOLD, ARENA_TRIM_THRESHOLD)
