"""Device sampling: a machine without NVML (or with it disabled) reports its CPU and memory, quietly."""

from __future__ import annotations

import logging

import pytest

from engine.monitoring import devices
from engine.monitoring.devices import DeviceSampler


@pytest.fixture
def fresh_log(monkeypatch):
    monkeypatch.setattr(devices, "_absence_logged", False)


def test_it_reports_cpu_and_memory_without_nvml(fresh_log):
    sampler = DeviceSampler(use_nvml=False)
    sample = sampler.sample().to_dict()
    assert sampler.has_gpu is False
    assert sample["gpus"] == []
    cpu = sample["cpu"]
    assert 0.0 <= cpu["utilization"] <= 1.0
    assert 0 < cpu["memory_used_bytes"] <= cpu["memory_total_bytes"]
    assert cpu["process_memory_bytes"] > 0


def test_it_says_once_at_info_that_there_is_no_gpu(fresh_log, caplog):
    caplog.set_level(logging.DEBUG, logger="engine.monitoring")
    for _ in range(3):
        DeviceSampler(use_nvml=False).sample()
    messages = [r for r in caplog.records if r.name == "engine.monitoring"]
    assert len(messages) == 1
    assert messages[0].levelno == logging.INFO
    assert "GPU monitoring is off" in messages[0].getMessage()


def test_it_honours_infera_disable_nvml(fresh_log, monkeypatch):
    monkeypatch.setenv("INFERA_DISABLE_NVML", "1")
    assert DeviceSampler().has_gpu is False


def test_it_samples_whatever_this_machine_has_without_raising(fresh_log):
    sampler = DeviceSampler()
    sample = sampler.sample()
    for gpu in sample.gpus:  # on a GPU machine: NVML's readings in Triton's units
        assert gpu.uuid
        assert gpu.utilization is None or 0.0 <= gpu.utilization <= 1.0
        assert gpu.memory_total_bytes is None or gpu.memory_total_bytes > 0
    assert sampler.has_gpu == bool(sample.gpus)


def test_it_reads_infera_disable_nvml_strictly(monkeypatch):
    import pytest

    from engine.monitoring.devices import _disabled_by_env

    for value, disabled in (("", False), ("0", False), ("false", False), ("1", True), ("yes", True), ("ON", True)):
        monkeypatch.setenv("INFERA_DISABLE_NVML", value)
        assert _disabled_by_env() is disabled
    monkeypatch.setenv("INFERA_DISABLE_NVML", "maybe")
    with pytest.raises(ValueError, match="INFERA_DISABLE_NVML must be a boolean"):
        _disabled_by_env()
