"""Live monitoring of the engine: device sampling, the per-second sampler, Prometheus exposition."""

from __future__ import annotations

from engine.monitoring.devices import CpuSample, DeviceSample, DeviceSampler, GpuSample
from engine.monitoring.prometheus import MetricsApp, render_metrics
from engine.monitoring.sampler import MetricsSampler

__all__ = [
    "CpuSample",
    "DeviceSample",
    "DeviceSampler",
    "GpuSample",
    "MetricsApp",
    "MetricsSampler",
    "render_metrics",
]
