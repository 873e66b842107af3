"""One tensor between numpy and the v2 wire: JSON `data` lists and the binary tensor extension."""

from __future__ import annotations

import struct
from math import prod
from typing import Any

import numpy as np

from engine.config.datatypes import numpy_dtype
from engine.errors import InvalidArgument

# JSON cannot carry these faithfully; Triton accepts and returns them only as binary data
BINARY_ONLY_TYPES = frozenset({"FP16", "BF16"})
_INTEGER_KINDS = "iu"
_NUMBER_KINDS = "iuf"
_LENGTH = struct.Struct("<I")
# as Triton: JSON `data` nested deeper than this is refused
MAX_JSON_DEPTH = 100
# flat JSON lists up to this many elements are range-checked by Python's min and max rather than numpy's
SMALL_LIST = 256
_INTEGER_RANGES = {
    dtype: (int(np.iinfo(dtype).min), int(np.iinfo(dtype).max))
    for dtype in (
        np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    )
}


def shape_text(shape: list[int] | tuple[int, ...]) -> str:
    """`[2, 16]`, the way error messages print shapes."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def element_count(shape: list[int]) -> int:
    """Number of elements a shape holds."""
    return prod(shape)


def array_from_json(name: str, datatype: str, shape: list[int], data: Any, model: str = "") -> np.ndarray:
    """Build the tensor of input `name` (of `model`) from its JSON `data` (flat or nested lists)."""
    if datatype in BINARY_ONLY_TYPES:
        raise InvalidArgument(f"input '{name}' of datatype {datatype} must be sent as binary data")
    if not isinstance(data, list):
        raise InvalidArgument(f"input '{name}' expects 'data' to be a list")
    count = element_count(shape)
    if datatype == "BYTES":
        values = _flatten_strings(name, data, count, model)
        if len(values) != count:
            raise InvalidArgument(
                f"{_fewer_strings(name, model, count, len(values))} ({_count_text(name, shape, len(values), count)})"
            )
        array = np.empty(len(values), dtype=object)
        array[:] = values
        return array.reshape(shape)
    flat = not data or type(data[0]) is not list
    if not flat and _depth(data) > MAX_JSON_DEPTH:
        raise InvalidArgument(_too_deep(name))
    try:
        values = np.asarray(data)  # C loop over the list; ragged nesting raises ValueError
    except (ValueError, TypeError, OverflowError):
        raise InvalidArgument(f"input '{name}' has 'data' that is not a regular list of numbers") from None
    if values.size != count:
        _check_count(name, shape, values.size, count)
    dtype = numpy_dtype(datatype)
    if count:
        _check_kind(name, datatype, dtype, values, small_flat=data if flat and count <= SMALL_LIST else None)
    return values.astype(dtype, copy=False).reshape(shape)


def array_from_typed(name: str, datatype: str, shape: list[int], field: str, values: Any) -> np.ndarray:
    """Build input `name` from typed element lists (gRPC's InferTensorContents, `field` the list used)."""
    count = element_count(shape)
    if datatype == "BYTES":
        items = [bytes(value) for value in values]
        _check_count(name, shape, len(items), count, field)
        array = np.empty(len(items), dtype=object)
        array[:] = items
        return array.reshape(shape)
    values = np.asarray(values)
    _check_count(name, shape, values.size, count, field)
    dtype = numpy_dtype(datatype)
    if values.size:
        _check_kind(name, datatype, dtype, values, field)
    return values.astype(dtype, copy=False).reshape(shape)


def _depth(data: list[Any]) -> int:
    """How deep the first elements nest (a regular list nests alike everywhere; numpy refuses a ragged one)."""
    depth = 0
    while isinstance(data, list):
        depth += 1
        if depth > MAX_JSON_DEPTH or not data:
            break
        data = data[0]
    return depth


def _flatten_strings(name: str, data: list[Any], limit: int, model: str = "") -> list[bytes]:
    """Flatten nested lists of strings to UTF-8 bytes, stopping past `limit` elements or MAX_JSON_DEPTH levels."""
    out: list[bytes] = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, str):
                out.append(item.encode("utf-8", "surrogatepass"))
                if len(out) > limit:
                    raise InvalidArgument(
                        f"{_more_strings(name, model, limit)} (input '{name}' has more than {limit} values in 'data')"
                    )
            elif isinstance(item, list):
                if len(stack) >= MAX_JSON_DEPTH:
                    raise InvalidArgument(_too_deep(name))
                stack.append(iter(item))
                break
            else:
                raise InvalidArgument(f"input '{name}' of datatype BYTES expects strings in 'data'")
        else:
            stack.pop()
    return out


def _check_count(name: str, shape: list[int], got: int, needed: int, field: str = "data") -> None:
    if got != needed:
        raise InvalidArgument(_count_text(name, shape, got, needed, field))


def _count_text(name: str, shape: list[int], got: int, needed: int, field: str = "data") -> str:
    return f"input '{name}' has {got} values in '{field}' but shape {shape_text(shape)} needs {needed}"


# Triton's words for a BYTES input's elements (core src/infer_request.cc, ValidateBytesInputs), Infera's after them
def _for_input(name: str, model: str) -> str:
    return f"inference input '{name}'" + (f" for model '{model}'" if model else "")


def _more_strings(name: str, model: str, expected: int) -> str:
    return f"unexpected number of string elements {expected + 1} for {_for_input(name, model)}, expecting {expected}"


def _fewer_strings(name: str, model: str, expected: int, got: int) -> str:
    return f"expected {expected} string elements for {_for_input(name, model)}, got {got}"


def _too_deep(name: str) -> str:
    """Triton's words (server src/http_server.cc) for JSON `data` nested past the limit, then Infera's."""
    return (
        f"JSON nesting depth exceeds maximum allowed limit ({MAX_JSON_DEPTH}): input '{name}' has 'data' nested "
        f"deeper than {MAX_JSON_DEPTH} levels"
    )


def _check_kind(
    name: str, datatype: str, dtype: np.dtype, values: np.ndarray, field: str = "data", small_flat: list | None = None
) -> None:
    """Refuse values of the wrong kind (strings for numbers, floats for integers, out of range).

    `small_flat` is the client's flat list when it is short: Python's min and max over it cost less than numpy's
    two reductions over the array.
    """
    kind = values.dtype.kind
    if datatype == "BOOL":
        if kind != "b":
            raise InvalidArgument(f"input '{name}' of datatype BOOL expects true or false in '{field}'")
        return
    if dtype.kind in _INTEGER_KINDS:
        if kind not in _INTEGER_KINDS:
            raise InvalidArgument(f"input '{name}' of datatype {datatype} expects integers in '{field}'")
        if values.dtype == dtype:
            return  # numpy chose this very type for the values: every one of them fits it
        low, high = _INTEGER_RANGES[dtype]
        smallest, largest = (min(small_flat), max(small_flat)) if small_flat else (values.min(), values.max())
        if smallest < low or largest > high:
            raise InvalidArgument(f"input '{name}' has values out of range for datatype {datatype}")
        return
    if kind not in _NUMBER_KINDS:
        raise InvalidArgument(f"input '{name}' of datatype {datatype} expects numbers in '{field}'")


def array_from_binary(name: str, datatype: str, shape: list[int], raw: memoryview, model: str = "") -> np.ndarray:
    """Build the tensor of input `name` (of `model`) from its slice of the binary section (little-endian, row
    major)."""
    count = element_count(shape)
    if datatype == "BYTES":
        return deserialize_bytes(name, raw, count, model).reshape(shape)
    dtype = numpy_dtype(datatype).newbyteorder("<")
    needed = count * dtype.itemsize
    if len(raw) != needed:
        raise InvalidArgument(  # Triton's text first (core infer_request.cc), then Infera's
            f"input byte size mismatch for input '{name}' for model '{model}'. Expected {needed}, got {len(raw)}: "
            f"input '{name}' has {len(raw)} bytes of binary data but shape {shape_text(shape)} "
            f"of {datatype} needs {needed}"
        )
    array = np.frombuffer(raw, dtype=dtype)
    if datatype == "BOOL" and count and np.frombuffer(raw, dtype=np.uint8).max() > 1:
        raise InvalidArgument(f"input '{name}' of datatype BOOL has bytes other than 0 and 1")
    return array.reshape(shape)


def deserialize_bytes(name: str, raw: memoryview, count: int, model: str = "") -> np.ndarray:
    """Split `count` length-prefixed BYTES elements (4-byte little-endian length, then the bytes).

    The count comes from the shape and bounds the walk: a buffer holding millions of empty elements is refused
    after `count` of them, not walked to its end.
    """
    end = len(raw)
    values: list[bytes] = []
    offset = 0
    unpack = _LENGTH.unpack_from
    while offset < end and len(values) < count:
        if end - offset < 4:
            raise InvalidArgument(
                f"incomplete string length indicator for {_for_input(name, model)}, expecting 4 bytes but only "
                f"{end - offset} bytes available. (input '{name}' has a truncated BYTES length prefix at byte {offset})"
            )
        (length,) = unpack(raw, offset)
        offset += 4
        if length > end - offset:
            raise InvalidArgument(
                f"input '{name}' has a BYTES element of {length} bytes at byte {offset - 4}, "
                f"beyond the {end} bytes of its buffer"
            )
        values.append(bytes(raw[offset : offset + length]))
        offset += length
    if len(values) != count:
        raise InvalidArgument(
            f"{_fewer_strings(name, model, count, len(values))} (input '{name}' has {len(values)} BYTES elements but "
            f"its shape needs {count})"
        )
    if offset != end:
        raise InvalidArgument(
            f"{_more_strings(name, model, count)} (input '{name}' has more BYTES elements than the {count} its shape "
            f"holds ({end - offset} bytes left over))"
        )
    array = np.empty(count, dtype=object)
    array[:] = values
    return array


def serialize_bytes(array: np.ndarray) -> bytes:
    """Length-prefix every element of a BYTES tensor (str elements are written as UTF-8)."""
    pack = _LENGTH.pack
    parts: list[bytes] = []
    for item in array.ravel(order="C").tolist():
        value = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        parts.append(pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def array_to_binary(datatype: str, array: np.ndarray) -> bytes:
    """The binary-extension bytes of an output tensor."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return array.tobytes(order="C")


def bytes_to_json_data(array: np.ndarray) -> list[str] | None:
    """A BYTES tensor as a flat list of strings, or None when an element is not valid UTF-8."""
    out: list[str] = []
    try:
        for item in array.ravel(order="C").tolist():
            out.append(item if isinstance(item, str) else bytes(item).decode("utf-8"))
    except UnicodeDecodeError:
        return None
    return out
