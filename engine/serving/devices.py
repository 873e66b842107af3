"""Which accelerators this process can use, found through NVML; no GPU is a normal state."""

from __future__ import annotations

import functools
import os
from typing import Any


def nvml() -> tuple[Any, str | None]:
    """(the initialised pynvml module, None), or (None, why not) when NVML or a driver is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver or no library: a machine without a GPU
        return None, str(exc)
    return pynvml, None


@functools.cache
def gpu_count() -> int:
    """The number of NVIDIA GPUs NVML reports, or 0 when NVML or a driver is absent."""
    library, _ = nvml()
    if library is None:
        return 0
    try:
        return int(library.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
