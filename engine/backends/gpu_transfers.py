"""Host-device transfers of GPU instances: pinned staging buffers, onnxruntime IO binding, and what each decision needs.

Every choice here is a plain function of the device, the config and what the runtimes offer, so it is tested on a
machine without a GPU; the transfers themselves run on a GPU only (bench/gpu.sh measures them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from engine.backends.base import Device
from engine.config.model_config import ModelConfig
from engine.serving.devices import usable_cores

# a host copy of at least two of these is split over threads, each taking one or more; smaller ones run inline
PARALLEL_COPY_BYTES = 2 << 20
STAGING_THREADS = 8  # at most this many threads copy one batch (a memcpy saturates memory bandwidth before 16)


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
    if not torch_can_pin(torch):
        return None

    def allocate(size: int) -> np.ndarray:
        return torch.empty(size, dtype=torch.uint8, pin_memory=True).numpy()  # the array keeps the tensor alive

    return PinnedBuffers(allocate)


class HostCopier:
    """Copies arrays into one contiguous destination, split over a few threads when it is large.

    A batch of 64 ResNet-50 images is 38.5 MB: one thread's memcpy took longer than the DMA that follows it and
    put the engine at 0.79x of plain torch at batch 64 on an H200 (bench/gpu.sh, 2026-12-04). numpy releases the
    GIL while it copies, so the slices copy in parallel.
    """

    def __init__(self, threads: int | None = None) -> None:
        self.threads = max(1, threads if threads is not None else min(STAGING_THREADS, usable_cores()))
        self._pool: ThreadPoolExecutor | None = None

    def copy(self, sources: list[np.ndarray], destination: np.ndarray) -> None:
        """`destination` (C-contiguous) holds the sources one after another, flattened."""
        target = destination.reshape(-1).view(np.uint8)
        flats = [np.ascontiguousarray(source).reshape(-1).view(np.uint8) for source in sources]
        total = sum(flat.size for flat in flats)
        if total != target.size:
            raise ValueError(f"{total} bytes to copy into {target.size}")
        parts = min(self.threads, total // PARALLEL_COPY_BYTES)
        if parts < 2:
            _copy_range(flats, target, 0, total)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="infera-staging")
        bounds = [total * k // parts for k in range(parts + 1)]
        for done in [self._pool.submit(_copy_range, flats, target, lo, hi) for lo, hi in itertools.pairwise(bounds)]:
            done.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def _copy_range(flats: list[np.ndarray], target: np.ndarray, lo: int, hi: int) -> None:
    """Bytes lo:hi of the sources laid end to end, into the same bytes of `target`."""
    at = 0
    for flat in flats:
        end = at + flat.size
        if end > lo and at < hi:
            first, last = max(lo, at), min(hi, end)
            np.copyto(target[first:last], flat[first - at : last - at])
        at = end
        if at >= hi:
            return


class PinnedBuffers:
    """Page-locked host buffers, one per tensor name, grown to the largest batch seen and reused batch after batch.

    A copy to the GPU from pinned memory is one DMA, where pageable memory is first copied into a bounce buffer.
    A batch of several requests is gathered straight into its buffer (the concatenation is the batch's one host
    copy); a single request's array is copied in. The caller finishes each batch's copies before the next batch
    stages its inputs (one batch at a time per instance), so reusing a buffer never overwrites bytes in flight.
    """

    def __init__(self, allocate: Callable[[int], np.ndarray], copier: HostCopier | None = None) -> None:
        self._allocate = allocate  # size in bytes -> a uint8 array in page-locked memory
        self._buffers: dict[str, np.ndarray] = {}
        self.copier = copier or HostCopier()

    def _view(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        buffer = self._buffers.get(name)
        if buffer is None or buffer.size < size:
            buffer = self._buffers[name] = self._allocate(max(size, 1))
        return buffer[:size].view(dtype).reshape(shape)

    def holds(self, name: str, array: np.ndarray) -> bool:
        """Whether `array` is already the staged batch of `name` (gathered there by `gather`)."""
        buffer = self._buffers.get(name)
        return buffer is not None and array.flags.c_contiguous and array.ctypes.data == buffer.ctypes.data

    def gather(self, name: str, arrays: list[np.ndarray]) -> np.ndarray:
        """The requests' arrays concatenated along the batch dimension in the buffer of `name`."""
        first = arrays[0]
        if first.ndim == 0 or any(a.dtype != first.dtype or a.shape[1:] != first.shape[1:] for a in arrays):
            return np.concatenate(arrays)  # what the default batching does, and the error it gives
        view = self._view(name, first.dtype, (sum(a.shape[0] for a in arrays), *first.shape[1:]))
        self.copier.copy(arrays, view)
        return view

    def stage(self, name: str, array: np.ndarray) -> np.ndarray:
        """`array`'s values in the pinned buffer of `name` (a numpy view of it, same dtype and shape)."""
        if self.holds(name, array):
            return array
        view = self._view(name, array.dtype, array.shape)
        self.copier.copy([array], view)
        return view

    def tensor(self, torch: Any, name: str, array: np.ndarray) -> Any:
        """`stage` as a torch tensor (for `.to(device, non_blocking=True)`)."""
        return torch.from_numpy(self.stage(name, array))

    def close(self) -> None:
        self.copier.close()


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
