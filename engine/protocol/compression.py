"""Request and response compression of the v2 HTTP protocol: gzip and deflate."""

from __future__ import annotations

import zlib

from engine.errors import InvalidArgument, PayloadTooLarge

SUPPORTED_ENCODINGS = ("gzip", "deflate")
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS
_RAW_WBITS = -zlib.MAX_WBITS
_IDENTITY = ("", "identity")


def decompress_body(body: bytes | bytearray, content_encoding: str | None, max_bytes: int) -> bytes:
    """Undo the request's `Content-Encoding`, refusing output past `max_bytes` (a zip bomb is a 413)."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in _IDENTITY:
        return bytes(body) if isinstance(body, bytearray) else body
    if encoding == "gzip":
        return _inflate(body, _GZIP_WBITS, "gzip", max_bytes)
    if encoding == "deflate":
        try:  # HTTP's "deflate" is the zlib format; some clients send a raw deflate stream
            return _inflate(body, _ZLIB_WBITS, "deflate", max_bytes)
        except InvalidArgument:
            return _inflate(body, _RAW_WBITS, "deflate", max_bytes)
    raise InvalidArgument(f"unsupported Content-Encoding '{content_encoding}': use gzip or deflate")


def _inflate(body: bytes | bytearray, wbits: int, name: str, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(body, max_bytes + 1)
        if len(out) > max_bytes:
            raise PayloadTooLarge(f"the decompressed request body exceeds {max_bytes} bytes")
        out += inflater.flush()
    except zlib.error as exc:
        raise InvalidArgument(f"the request body is not valid {name} data: {exc}") from None
    if not inflater.eof or inflater.unused_data:
        raise InvalidArgument(f"the request body is not valid {name} data: truncated or trailing bytes")
    if len(out) > max_bytes:
        raise PayloadTooLarge(f"the decompressed request body exceeds {max_bytes} bytes")
    return out


def choose_response_encoding(accept_encoding: str | None) -> str | None:
    """The encoding to answer with from an `Accept-Encoding` header: gzip or deflate, else None."""
    if not accept_encoding:
        return None
    best: tuple[float, str] | None = None
    for part in accept_encoding.split(","):
        token, _, params = part.strip().partition(";")
        token = token.strip().lower()
        if token not in SUPPORTED_ENCODINGS:
            continue
        quality = 1.0
        params = params.strip()
        if params.startswith("q="):
            try:
                quality = float(params[2:])
            except ValueError:
                quality = 0.0
        if quality > 0 and (best is None or quality > best[0]):
            best = (quality, token)
    return best[1] if best else None


def compress_body(body: bytes, encoding: str) -> bytes:
    """Compress a response body with gzip or deflate (zlib format, as HTTP means it)."""
    wbits = _GZIP_WBITS if encoding == "gzip" else _ZLIB_WBITS
    compressor = zlib.compressobj(1, zlib.DEFLATED, wbits)
    return compressor.compress(body) + compressor.flush()
