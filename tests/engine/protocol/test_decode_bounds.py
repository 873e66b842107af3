"""Decoding is bounded by the shape before it is done: no request can make the server walk more than it declared."""

from __future__ import annotations

import orjson
import pytest

from engine.errors import InvalidArgument
from engine.protocol import decode_infer_request
from engine.protocol.tensors import MAX_JSON_DEPTH

# a buffer of this many zero-length BYTES elements: 4 bytes each
FLOOD = 4_000_000


def _bytes_input(shape: list[int], payload: bytes) -> tuple[bytes, int]:
    header = orjson.dumps(
        {
            "inputs": [
                {"name": "TEXT", "datatype": "BYTES", "shape": shape, "parameters": {"binary_data_size": len(payload)}}
            ]
        }
    )
    return header + payload, len(header)


def test_a_flood_of_empty_bytes_elements_stops_at_the_count_its_shape_declares(mixed_config):
    """The attack: [16] declared, millions of empty elements sent; the walk stopped only at the buffer's end."""
    body, header_length = _bytes_input([16], b"\0" * (4 * FLOOD))
    with pytest.raises(
        InvalidArgument, match=f"more BYTES elements than the 16 its shape holds \\({4 * (FLOOD - 16)} bytes"
    ):
        decode_infer_request(body, header_length, mixed_config)


def test_json_bytes_data_stops_past_its_count_and_past_the_nesting_limit(mixed_config):
    flat = orjson.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [2], "data": ["a"] * 100_000}]})
    with pytest.raises(InvalidArgument, match="has more than 2 values in 'data'"):
        decode_infer_request(flat, None, mixed_config)
    nested: object = ["a"]
    for _ in range(MAX_JSON_DEPTH + 20):
        nested = [nested]
    deep = orjson.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": nested}]})
    with pytest.raises(InvalidArgument, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        decode_infer_request(deep, None, mixed_config)


def test_a_huge_declared_shape_is_refused_before_anything_is_allocated(mixed_config):
    body, header_length = _bytes_input([10**12], b"\0" * 64)
    with pytest.raises(InvalidArgument, match="has 16 BYTES elements but its shape needs 1000000000000"):
        decode_infer_request(body, header_length, mixed_config)
    numbers = orjson.dumps(
        {"inputs": [{"name": "F32", "datatype": "FP32", "shape": [2, 10**12], "parameters": {"binary_data_size": 8}}]}
    )
    with pytest.raises(InvalidArgument, match="has 8 bytes of binary data but shape"):
        decode_infer_request(numbers + b"\0" * 8, len(numbers), mixed_config)


def test_numeric_json_data_past_the_nesting_limit_is_refused(mixed_config):
    nested: object = [1.0, 2.0]
    for _ in range(MAX_JSON_DEPTH):
        nested = [nested]
    deep = orjson.dumps({"inputs": [{"name": "F32", "datatype": "FP32", "shape": [2, 1], "data": nested}]})
    with pytest.raises(InvalidArgument, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        decode_infer_request(deep, None, mixed_config)


def test_a_negative_dimension_is_a_400(mixed_config):
    body = orjson.dumps({"inputs": [{"name": "F32", "datatype": "FP32", "shape": [2, -3], "data": [0.0] * 6}]})
    with pytest.raises(InvalidArgument, match="'shape' list of non-negative integers"):
        decode_infer_request(body, None, mixed_config)
