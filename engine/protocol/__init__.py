"""The v2 inference protocol's codecs: JSON and binary tensors, BYTES, compression, error bodies.

Pure functions over bytes, numpy and orjson, shared by the HTTP front end and any other front end.
"""

from engine.protocol.compression import choose_response_encoding, compress_body, decompress_body
from engine.protocol.error_body import error_body
from engine.protocol.inference_request import (
    ConfigChoice,
    decode_infer_request,
    parse_header_length,
    parse_json_object,
)
from engine.protocol.inference_response import encode_infer_response
from engine.protocol.tensors import deserialize_bytes, serialize_bytes

__all__ = [
    "ConfigChoice",
    "choose_response_encoding",
    "compress_body",
    "decode_infer_request",
    "decompress_body",
    "deserialize_bytes",
    "encode_infer_response",
    "error_body",
    "parse_header_length",
    "parse_json_object",
    "serialize_bytes",
]
