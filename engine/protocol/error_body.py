"""The JSON body Triton answers errors with: {"error": "..."}."""

from __future__ import annotations

import orjson

from engine.errors import InferaError


def error_body(error: InferaError | str) -> bytes:
    """Serialize an engine error (or a plain message) as the v2 error object."""
    message = error.message if isinstance(error, InferaError) else error
    return orjson.dumps({"error": message})
