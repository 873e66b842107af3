"""The management API's JSON parser: DRF's, with a bounded nesting depth.

Python's json module recurses once per level, so a body of a few thousand '[' ended in RecursionError, a 500 (a
config sent to /api/models/<m>/config/validate, say). Bodies are read with orjson and refused past
engine.config.text_format.MAX_JSON_DEPTH levels: a 400 naming the limit, as the engine refuses configs nested that deep.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import parsers
from rest_framework.exceptions import ParseError

from engine.api import InvalidArgument, load_json


class JSONParser(parsers.JSONParser):
    """JSON bodies, nested at most MAX_JSON_DEPTH levels deep; NaN and Infinity refused as DRF's strict mode does."""

    def parse(self, stream, media_type=None, parser_context=None) -> Any:
        body = stream.read() if stream is not None else b""
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        if encoding.lower().replace("-", "") != "utf8":
            try:
                body = body.decode(encoding)
            except (LookupError, UnicodeDecodeError) as exc:
                raise ParseError(f"the request body is not {encoding} text: {exc}") from None
        try:
            return load_json(body, "the request body")
        except InvalidArgument as exc:
            raise ParseError(exc.message) from None
