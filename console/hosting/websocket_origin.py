"""WebSocket origin check: a socket is accepted only from a page of this very origin (scheme, host and port).

Channels' AllowedHostsOriginValidator compares the Origin's host with ALLOWED_HOSTS and ignores its port, so a page
served by any other program on the same host (another port) could open a dashboard socket with the user's cookie.
This validator compares the whole origin with the Host the socket was opened on, and also accepts the origins listed
in INFERA_CSRF_TRUSTED_ORIGINS (a console behind a proxy on another name).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import validate_host

ASGIApp = Callable[[dict, Callable, Callable], Awaitable[None]]
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _origin_key(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    return scheme, host.lower(), port if port is not None else DEFAULT_PORTS.get(scheme, 0)


def origin_allowed(origin: str, host_header: str, secure: bool) -> bool:
    """True when `origin` is this server's own (as reached through `host_header`) or a trusted one."""
    try:
        parsed = urlsplit(origin)
        wanted = _origin_key(parsed.scheme, parsed.hostname or "", parsed.port)
        own_host = urlsplit(f"//{host_header}")
        own = _origin_key("https" if secure else "http", own_host.hostname or "", own_host.port)
    except ValueError:
        return False
    if not wanted[1] or not validate_host(own[1], settings.ALLOWED_HOSTS):
        return False
    if wanted == own:
        return True
    for trusted in settings.CSRF_TRUSTED_ORIGINS:
        item = urlsplit(trusted)
        if wanted == _origin_key(item.scheme, item.hostname or "", item.port):
            return True
    return False


class SameOriginValidator:
    """Closes (403) a WebSocket whose Origin is missing or not this server's own."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] == "websocket":
            headers = {
                name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", ())
            }
            origin, host = headers.get("origin"), headers.get("host", "")
            if origin is None or not origin_allowed(origin, host, scope.get("scheme") == "wss"):
                await receive()  # the connect message
                await send({"type": "websocket.close", "code": 403})
                return
        await self.app(scope, receive, send)
