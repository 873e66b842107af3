"""Where a model version's instances run and how its files open there: one device and Triton's instance name per
instance from `instance_group`, the backend loaded on a device (the one way for real loads and trial loads).
"""

from __future__ import annotations

from pathlib import Path

from engine.backends import Backend, Device, get_backend
from engine.backends.base import InstanceContext
from engine.config.model_config import InstanceGroup, ModelConfig, cpu_instance_count
from engine.errors import LoadError


def instance_devices(config: ModelConfig, gpus: int) -> list[Device]:
    """One Device per instance, from `instance_group` (count per GPU for KIND_GPU, as Triton counts)."""
    return [device for device, _ in instance_slots(config, gpus)]


def instance_slots(config: ModelConfig, gpus: int) -> list[tuple[Device, str]]:
    """(device, Triton's instance name) per instance: `<group name>_<index in group>`, a group being named
    `<model>_<group index>` unless its config names it."""
    slots: list[tuple[Device, str]] = []
    for index, group in enumerate(config.instance_group or [InstanceGroup(count_given=False)]):
        group_name = group.name or f"{config.name}_{index}"
        devices = _group_devices(config, group, gpus)
        slots += [(device, f"{group_name}_{i}") for i, device in enumerate(devices)]
    return slots


def _group_devices(config: ModelConfig, group: InstanceGroup, gpus: int) -> list[Device]:
    kind = group.kind
    if kind == "KIND_AUTO":
        kind = "KIND_GPU" if gpus and config.backend_name != "python" else "KIND_CPU"
    if kind != "KIND_GPU":
        return [Device("CPU", 0) for _ in range(cpu_instance_count(group, config.backend_name))]
    if not gpus:
        raise LoadError(f"instance group '{group.name or config.name}' asks for KIND_GPU but this machine has no GPU")
    ids = group.gpus or list(range(gpus))
    missing = [g for g in ids if g >= gpus]
    if missing:
        raise LoadError(f"instance group asks for GPU {missing}, this machine has {gpus} GPU(s)")
    return [Device("GPU", g) for g in ids for _ in range(group.count)]


def open_backend(config: ModelConfig, path: Path, device: Device, context: InstanceContext | None = None) -> Backend:
    """The version's backend on `device`, loaded; the one way a version's files are opened (real and trial loads)."""
    backend = get_backend(config.backend_name)(config, path, device, context)
    backend.load()
    return backend


def trial_load(config: ModelConfig, path: Path, gpus: int) -> None:
    """Load the version once on the CPU with its backend and release it; raise LoadError with the runtime's reason.

    One CPU instance proves the files and the config agree and takes no GPU memory from what is serving; the
    instance groups are still checked against this machine, so KIND_GPU without a GPU fails here.
    """
    instance_devices(config, gpus)
    try:
        backend = open_backend(config, path, Device("CPU", 0))
    except LoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - a runtime's own exception is a load failure with its reason
        raise LoadError(f"loading the model failed: {type(exc).__name__}: {exc}") from exc
    backend.unload()
