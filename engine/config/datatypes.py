"""Triton data types: config names (TYPE_FP32), wire names (FP32) and numpy dtypes."""

from __future__ import annotations

import numpy as np

try:  # bfloat16 travels as raw bytes; ml_dtypes gives numpy a real dtype for it when present
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # pragma: no cover - ml_dtypes ships with onnx
    _bfloat16 = None

WIRE_TO_NUMPY: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}
if _bfloat16 is not None:
    WIRE_TO_NUMPY["BF16"] = np.dtype(_bfloat16)

WIRE_TYPES: frozenset[str] = frozenset(list(WIRE_TO_NUMPY) + ["BF16"])


def config_to_wire(type_name: str) -> str:
    """TYPE_FP32 -> FP32; TYPE_STRING -> BYTES (Triton's spelling in metadata)."""
    name = type_name.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def wire_to_config(wire: str) -> str:
    """FP32 -> TYPE_FP32; BYTES -> TYPE_STRING."""
    return "TYPE_STRING" if wire == "BYTES" else f"TYPE_{wire}"


def numpy_dtype(wire: str) -> np.dtype:
    """The numpy dtype that holds a tensor of this wire type."""
    try:
        return WIRE_TO_NUMPY[wire]
    except KeyError:
        raise ValueError(f"unsupported datatype '{wire}'") from None


_NUMPY_TO_WIRE: dict[np.dtype, str] = {dtype: wire for wire, dtype in WIRE_TO_NUMPY.items() if wire != "BYTES"}


def wire_type_of(array: np.ndarray) -> str:
    """The wire type name for a numpy array (object and bytes arrays are BYTES)."""
    dtype = array.dtype
    wire = _NUMPY_TO_WIRE.get(dtype)
    if wire is not None:
        return wire
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    for wire, candidate in WIRE_TO_NUMPY.items():  # a byte order or alignment variant of a known type
        if candidate == dtype:
            return wire
    raise ValueError(f"no Triton datatype for numpy dtype {dtype}")


def element_size(wire: str) -> int:
    """Bytes per element for fixed-size types; 0 for BYTES."""
    if wire == "BYTES":
        return 0
    if wire == "BF16":
        return 2
    return numpy_dtype(wire).itemsize
