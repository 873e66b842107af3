"""Per-device samples: each NVIDIA GPU through NVML, and the host's CPU and memory through psutil.

A machine without a GPU (or without a driver) is a normal state: the sampler then reports the CPU only, says so once
in the log at info level, and never raises.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

from engine.environment.values import read_bool
from engine.serving.devices import nvml

log = logging.getLogger("engine.monitoring")

_absence_logged = False


@dataclass(slots=True)
class GpuSample:
    """One GPU at one moment; a field NVML cannot read on this board is None."""

    index: int
    uuid: str
    name: str
    utilization: float | None  # 0.0 - 1.0, as Triton's nv_gpu_utilization
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    power_watts: float | None
    temperature_c: float | None


@dataclass(slots=True)
class CpuSample:
    """The host at one moment: CPU busy fraction, system memory, and this process's resident memory."""

    utilization: float  # 0.0 - 1.0 over all cores since the previous sample
    memory_used_bytes: int
    memory_total_bytes: int
    process_memory_bytes: int


@dataclass(slots=True)
class DeviceSample:
    """Every device at one moment; `gpus` is empty on a machine without one."""

    cpu: CpuSample
    gpus: list[GpuSample] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"cpu": asdict(self.cpu), "gpus": [asdict(g) for g in self.gpus]}


class DeviceSampler:
    """Reads every device; `use_nvml=False` behaves as a machine without a GPU (INFERA_DISABLE_NVML=1 too)."""

    def __init__(self, *, use_nvml: bool | None = None) -> None:
        if use_nvml is None:
            use_nvml = not _disabled_by_env()
        self._nvml: Any = _init_nvml() if use_nvml else None
        if self._nvml is None:
            _log_absence_once("GPU monitoring is off: NVML is disabled")
        self._handles = self._gpu_handles()
        self._process = psutil.Process()
        self._cpu_times = psutil.cpu_times()

    @property
    def has_gpu(self) -> bool:
        return bool(self._handles)

    def sample(self) -> DeviceSample:
        """Read every device now; never raises for a value a board or driver cannot give."""
        return DeviceSample(cpu=self._sample_cpu(), gpus=[self._sample_gpu(i, h) for i, h in self._handles])

    def _gpu_handles(self) -> list[tuple[int, Any]]:
        if self._nvml is None:
            return []
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
            handles = [(i, self._nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        except Exception as exc:  # noqa: BLE001 - a broken driver leaves the CPU panel working
            _log_absence_once(f"GPU monitoring is off: NVML could not list devices ({exc})")
            return []
        if not handles:
            _log_absence_once("GPU monitoring is off: NVML reports no GPU on this machine")
        return handles

    def _sample_gpu(self, index: int, handle: Any) -> GpuSample:
        nvml = self._nvml
        utilization = _read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
        memory = _read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        return GpuSample(
            index=index,
            uuid=_text(_read(lambda: nvml.nvmlDeviceGetUUID(handle))) or f"GPU-{index}",
            name=_text(_read(lambda: nvml.nvmlDeviceGetName(handle))) or "",
            utilization=utilization,
            memory_used_bytes=int(memory.used) if memory is not None else None,
            memory_total_bytes=int(memory.total) if memory is not None else None,
            # NVML reports milliwatts
            power_watts=_read(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            temperature_c=_read(lambda: float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
        )

    def _sample_cpu(self) -> CpuSample:
        # our own delta of cpu_times, so other callers of psutil.cpu_percent() do not steal our interval
        now = psutil.cpu_times()
        busy, total = _busy_and_total(now, self._cpu_times)
        self._cpu_times = now
        memory = psutil.virtual_memory()
        try:
            rss = int(self._process.memory_info().rss)
        except psutil.Error:
            rss = 0
        return CpuSample(
            utilization=min(1.0, max(0.0, busy / total)) if total > 0 else 0.0,
            memory_used_bytes=int(memory.total - memory.available),
            memory_total_bytes=int(memory.total),
            process_memory_bytes=rss,
        )


def _busy_and_total(now: Any, before: Any) -> tuple[float, float]:
    total = sum(now) - sum(before)
    idle = (now.idle - before.idle) + (getattr(now, "iowait", 0.0) - getattr(before, "iowait", 0.0))
    return total - idle, total


def _init_nvml() -> Any:
    library, why_not = nvml()
    if library is None:
        _log_absence_once(f"GPU monitoring is off: no NVIDIA driver found ({why_not})")
    return library


def _read(read: Any) -> Any:
    try:
        return read()
    except Exception:  # noqa: BLE001 - e.g. power readings unsupported on this board
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _log_absence_once(message: str) -> None:
    global _absence_logged
    if not _absence_logged:
        _absence_logged = True
        log.info("%s; showing CPU and memory instead", message)


def _disabled_by_env() -> bool:
    """INFERA_DISABLE_NVML through the engine's one strict boolean reader (a wrong value names the variable)."""
    return read_bool("INFERA_DISABLE_NVML", False, os.environ)
