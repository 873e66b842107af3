"""Host-device transfers of GPU instances: pinned staging buffers, onnxruntime IO binding, and what each decision needs.

Every choice here is a plain function of the device, the config and what the runtimes offer, so it is tested on a
machine without a GPU; the transfers themselves run on a GPU only (bench/gpu.sh measures them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.backends.base import Device
from engine.config import ModelConfig


def has_string_tensor(config: ModelConfig) -> bool:
    return any(t.data_type == "TYPE_STRING" for t in config.input + config.output)


def uses_io_binding(device: Device, config: ModelConfig, providers: list[str]) -> bool:
    """Whether an onnxruntime instance runs through an IoBinding: on a GPU whose session got the CUDA provider, for
    tensors that live on the device (strings stay on the host in onnxruntime)."""
    return device.is_gpu and "CUDAExecutionProvider" in providers and not has_string_tensor(config)


def fixed_shapes(config: ModelConfig) -> bool:
    """Every input has one shape per batch size: no variable dimension, no optional input, no strings."""
    return (
        bool(config.input)
        and all(-1 not in t.dims and not t.optional for t in config.input)
        and not has_string_tensor(config)
    )


def torch_can_pin(torch: Any) -> bool:
    """Pinned (page-locked) host memory needs a CUDA device torch can use."""
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA setup means plain host memory
        return False


def pinned_buffers(device: Device) -> PinnedBuffers | None:
    """Staging buffers for a GPU instance when torch can pin host memory here, else None (plain numpy memory)."""
    if not device.is_gpu:
        return None
    try:
        import torch
    except ImportError:
        return None
    return PinnedBuffers(torch) if torch_can_pin(torch) else None


class PinnedBuffers:
    """Page-locked host buffers, one per tensor name, grown to the largest batch seen and reused batch after batch.

    A copy to the GPU from pinned memory is one DMA, where pageable memory is first copied into a bounce buffer.
    The caller finishes each batch's copies before the next batch stages its inputs (one batch at a time per
    instance), so reusing a buffer never overwrites bytes still in flight.
    """

    def __init__(self, torch: Any) -> None:
        self._torch = torch
        self._buffers: dict[str, Any] = {}

    def stage(self, name: str, array: np.ndarray) -> np.ndarray:
        """`array`'s values in the pinned buffer of `name` (a numpy view of it, same dtype and shape)."""
        size = array.nbytes
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < size:
            buffer = self._buffers[name] = self._torch.empty(max(size, 1), dtype=self._torch.uint8, pin_memory=True)
        view = buffer.numpy()[:size].view(array.dtype).reshape(array.shape)
        np.copyto(view, array)
        return view

    def tensor(self, name: str, array: np.ndarray) -> Any:
        """`stage` as a torch tensor (for `.to(device, non_blocking=True)`)."""
        return self._torch.from_numpy(self.stage(name, array))


class IoBindingRunner:
    """Runs an onnxruntime session through an IoBinding on `device_type` ('cuda' on a GPU, 'cpu' in tests).

    Inputs go to the device from their (pinned) host copies; outputs are allocated on the device by onnxruntime and
    copied to the host once, at the end of the batch.
    """

    def __init__(
        self,
        session: Any,
        output_names: list[str],
        device_type: str,
        device_id: int = 0,
        pinned: PinnedBuffers | None = None,
    ) -> None:
        import onnxruntime as ort

        self._ort = ort
        self.session = session
        self.output_names = output_names
        self.device_type = device_type
        self.device_id = device_id
        self.pinned = pinned

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        binding = self.session.io_binding()
        for name, array in feeds.items():
            host = self.pinned.stage(name, array) if self.pinned is not None else np.ascontiguousarray(array)
            value = self._ort.OrtValue.ortvalue_from_numpy(host, self.device_type, self.device_id)
            binding.bind_ortvalue_input(name, value)
        for name in self.output_names:
            binding.bind_output(name, self.device_type, self.device_id)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()
