"""Refusing /v2 POSTs that a browser sends on behalf of another site (a drive-by from any web page).

Triton's clients (tritonclient, curl, perf_analyzer, gRPC stubs) send neither `Origin` nor `Sec-Fetch-Site`, and
browsers always send at least one of them with a POST. So a POST whose `Sec-Fetch-Site` says another site, or whose
`Origin` is not this server's own (or one the operator trusts), is refused with 403 before its body is read.
Repository changes also refuse the content types an HTML form or a `no-cors` fetch can send without a preflight.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.errors import Forbidden, InferaError

FOREIGN_FETCH_SITES = frozenset({b"cross-site", b"same-site"})
# what a browser may send cross-origin without asking first (CORS "simple" content types)
FORM_CONTENT_TYPES = frozenset({"text/plain", "application/x-www-form-urlencoded", "multipart/form-data"})


class UnsupportedMediaType(InferaError):
    """The body's content type is not one the endpoint takes (HTTP 415)."""

    status = 415


def _headers(scope: Mapping[str, Any]) -> dict[bytes, bytes]:
    return {name.lower(): value for name, value in scope.get("headers", ())}


def own_origin(scope: Mapping[str, Any], headers: Mapping[bytes, bytes]) -> str:
    """`scheme://host[:port]` of this server as the request reached it (from its Host header)."""
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    return f"{scheme}://{host}"


def check_same_origin(scope: Mapping[str, Any], trusted_origins: Iterable[str] = ()) -> None:
    """Raise Forbidden (403) for a POST a browser sends from another site."""
    headers = _headers(scope)
    site = headers.get(b"sec-fetch-site", b"").strip().lower()
    if site in FOREIGN_FETCH_SITES:
        raise Forbidden(f"cross-site request refused: a page on another site ({site.decode()}) may not POST to /v2")
    origin = headers.get(b"origin")
    if origin is None:
        return
    shown = origin.decode("latin-1").strip()
    wanted = shown.lower().rstrip("/")
    if wanted == own_origin(scope, headers) or wanted in {o.lower().rstrip("/") for o in trusted_origins}:
        return
    raise Forbidden(f"cross-site request refused: Origin '{shown[:200]}' is not this server's origin")


def check_repository_content_type(scope: Mapping[str, Any]) -> None:
    """Raise UnsupportedMediaType (415) when a repository change comes as form data or plain text."""
    raw = _headers(scope).get(b"content-type")
    if raw is None:
        return  # tritonclient sends none; a browser always sends one with a body
    media_type = raw.decode("latin-1").split(";", 1)[0].strip().lower()
    if media_type in FORM_CONTENT_TYPES:
        raise UnsupportedMediaType(
            f"repository load and unload take a JSON body (Content-Type: application/json), not {media_type}"
        )
