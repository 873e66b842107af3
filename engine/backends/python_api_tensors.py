"""`Tensor`: a named numpy array model code reads and returns, to and from DLPack (torch's bfloat16 included)."""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.backends.python_api_errors import TritonModelException
from engine.config.datatypes import numpy_dtype, wire_type_of

# Triton's words (python_backend src/pb_tensor.cc, PbTensor::AsNumpy)
BF16_AS_NUMPY = "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."


class Tensor:
    """A named tensor holding one numpy array (BF16 as ml_dtypes.bfloat16, BYTES as an object array)."""

    def __init__(self, name: str, data: np.ndarray) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(f"tensor '{name}' must hold a numpy array, got {type(data).__name__}")
        self._name = name
        self._data = data

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        """The tensor's numpy array; BF16 has none in numpy, so it raises as Triton's does (use to_dlpack())."""
        if wire_type_of(self._data) == "BF16":
            raise TritonModelException(BF16_AS_NUMPY)
        return self._data

    def _array(self) -> np.ndarray:
        """The array the server carries, BF16 (ml_dtypes.bfloat16) included: not part of Triton's API."""
        return self._data

    def shape(self) -> list[int]:
        return list(self._data.shape)

    def triton_dtype(self) -> str:
        return wire_type_of(self._data)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of this tensor (torch.from_dlpack and friends take it without a copy)."""
        data = self._data
        if data.dtype.kind == "O":
            raise TritonModelException(f"tensor '{self._name}' holds BYTES, which DLPack cannot carry")
        if not data.flags.writeable or not data.flags.c_contiguous:
            data = np.ascontiguousarray(data).copy()  # DLPack cannot say read-only; the capsule gets its own copy
        if wire_type_of(data) == "BF16":
            torch = _torch(f"tensor '{self._name}' is BF16: to_dlpack() needs torch, which carries bfloat16")
            return torch.utils.dlpack.to_dlpack(torch.from_numpy(data.view(np.int16)).view(torch.bfloat16))
        return data.__dlpack__()

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor from a DLPack capsule or an object with `__dlpack__` (a torch tensor, a numpy array)."""
        if isinstance(capsule, np.ndarray):
            return Tensor(name, capsule)
        torch = _optional_torch()
        if torch is not None and (type(capsule).__name__ == "PyCapsule" or isinstance(capsule, torch.Tensor)):
            value = capsule if isinstance(capsule, torch.Tensor) else torch.utils.dlpack.from_dlpack(capsule)
            return Tensor(name, _torch_to_numpy(torch, value))
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        try:
            return Tensor(name, np.from_dlpack(source))
        except (BufferError, TypeError, RuntimeError) as exc:
            raise TritonModelException(f"tensor '{name}' cannot be made from DLPack: {exc}") from None

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={list(self._data.shape)}, dtype={self._data.dtype})"


class _Capsule:
    """A bare DLPack capsule, as numpy.from_dlpack wants it (an object with __dlpack__ on the CPU)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _optional_torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def _torch(why: str) -> Any:
    torch = _optional_torch()
    if torch is None:
        raise TritonModelException(why)
    return torch


def _torch_to_numpy(torch: Any, value: Any) -> np.ndarray:
    value = value.detach().cpu().contiguous()
    if value.dtype == torch.bfloat16:
        return value.view(torch.int16).numpy().view(numpy_dtype("BF16"))
    return value.numpy()
