"""Request decompression and response compression (gzip, deflate)."""

from __future__ import annotations

import gzip
import zlib

import pytest

from engine.errors import InvalidArgument, PayloadTooLarge
from engine.protocol import choose_response_encoding, compress_body, decompress_body

BODY = b'{"inputs": []}' * 50


def test_it_passes_an_uncompressed_body_through():
    assert decompress_body(BODY, None, 10_000) is BODY
    assert decompress_body(BODY, "identity", 10_000) is BODY


def test_it_inflates_gzip_and_deflate_as_tritonclient_sends_them():
    assert decompress_body(gzip.compress(BODY), "gzip", 10_000) == BODY
    assert decompress_body(zlib.compress(BODY), "deflate", 10_000) == BODY
    assert decompress_body(zlib.compress(BODY), " Deflate ", 10_000) == BODY


def test_it_inflates_a_raw_deflate_stream():
    compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    raw = compressor.compress(BODY) + compressor.flush()
    assert decompress_body(raw, "deflate", 10_000) == BODY


def test_it_names_an_unsupported_encoding():
    with pytest.raises(InvalidArgument, match="unsupported Content-Encoding 'br'"):
        decompress_body(BODY, "br", 10_000)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_it_refuses_corrupt_data(encoding):
    with pytest.raises(InvalidArgument, match=f"not valid {encoding} data"):
        decompress_body(b"\x1f\x8bnot really compressed", encoding, 10_000)


def test_it_refuses_a_truncated_gzip_stream():
    with pytest.raises(InvalidArgument, match="truncated"):
        decompress_body(gzip.compress(BODY)[:-12], "gzip", 10_000)


def test_it_stops_a_zip_bomb_at_the_body_limit():
    bomb = gzip.compress(b"\x00" * 5_000_000)
    with pytest.raises(PayloadTooLarge, match="exceeds 1000000 bytes"):
        decompress_body(bomb, "gzip", 1_000_000)


@pytest.mark.parametrize(
    ("header", "chosen"),
    [
        (None, None),
        ("", None),
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("br, deflate", "deflate"),
        ("gzip;q=0.5, deflate", "deflate"),
        ("gzip;q=0", None),
        ("identity", None),
    ],
)
def test_it_negotiates_the_response_encoding(header, chosen):
    assert choose_response_encoding(header) == chosen


def test_it_compresses_what_clients_decompress():
    assert gzip.decompress(compress_body(BODY, "gzip")) == BODY
    assert zlib.decompress(compress_body(BODY, "deflate")) == BODY
