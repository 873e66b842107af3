"""Which accelerators this process can use, found through NVML; no GPU is a normal state."""

from __future__ import annotations

import functools


@functools.cache
def gpu_count() -> int:
    """The number of NVIDIA GPUs NVML reports, or 0 when NVML or a driver is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - a machine without a driver simply has no GPU
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0
