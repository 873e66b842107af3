"""Token checks for the engine's /v2 front end, which runs outside Django's request stack.

`make_v2_authenticator(mode)` returns the async hook the V2App awaits with each request's ASGI scope (health
endpoints are never passed to it): True lets the request through, a refusal raises Unauthorized (401). Mode
`token` demands an active token of any role, `none` lets every request through, and `auto` (INFERA_INFERENCE_AUTH
unset) means `token` when the server listens on a non-loopback address and `none` on loopback. Verified keys are
cached for a few seconds so the hot path rarely touches the database.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.db import database_sync_to_async

from console.accounts.roles import role_of
from console.accounts.tokens import TokenRefused, find_token, hash_key, key_from_authorization
from engine.frontend.http import Unauthorized

logger = logging.getLogger("console.accounts.inference_auth")

MODES = ("token", "none", "auto")
CACHE_SECONDS = 5.0
CACHE_ENTRIES = 4096

V2Authenticator = Callable[[Mapping[str, Any]], Awaitable[bool]]


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`; False for wildcard, other addresses and unknown (None)."""
    if not host:
        return False
    host = host.strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def resolve_mode(configured: str | None, listen_host: str | None) -> str:
    """`token` or `none` from INFERA_INFERENCE_AUTH and the listen address ('auto' and unset decide by the address)."""
    mode = (configured or "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"INFERA_INFERENCE_AUTH must be one of token, none (or unset), got {configured!r}")
    if mode != "auto":
        return mode
    return "none" if is_loopback(listen_host) else "token"


class TokenCache:
    """Verdicts on presented keys (by their hash), kept `ttl` seconds; revocation takes effect within `ttl`."""

    def __init__(
        self, ttl: float = CACHE_SECONDS, size: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic
    ):
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self._entries: OrderedDict[str, tuple[float, str | None]] = OrderedDict()

    def get(self, digest: str) -> tuple[bool, str | None]:
        """(found, refusal): refusal is None for an accepted key, the reason for a refused one."""
        entry = self._entries.get(digest)
        if entry is None or entry[0] <= self.clock():
            self._entries.pop(digest, None)
            return False, None
        return True, entry[1]

    def put(self, digest: str, refusal: str | None) -> None:
        """Remember the verdict on one key, dropping the oldest entry when full."""
        self._entries[digest] = (self.clock() + self.ttl, refusal)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every verdict (tests, and after revoking tokens in this process)."""
        self._entries.clear()


token_cache = TokenCache()


def _check_key(key: str) -> str | None:
    """None when `key` is an active token of a user with any role, else the reason it is refused."""
    try:
        token = find_token(key)
    except TokenRefused as refused:
        return str(refused)
    if role_of(token.user) is None:
        return f"API token '{token.name}' belongs to a user with no role"
    return None


_check_key_async = database_sync_to_async(_check_key)


def authorization_from_scope(scope: Mapping[str, Any]) -> str | None:
    """The Authorization header of an ASGI HTTP scope, decoded, or None."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            return value.decode("latin-1")
    return None


async def verify_scope(scope: Mapping[str, Any], cache: TokenCache = token_cache) -> bool:
    """True when the scope carries an active token; raises Unauthorized saying what is wrong otherwise."""
    header = authorization_from_scope(scope)
    if header is None:
        raise Unauthorized("this server requires an API token: send 'Authorization: Bearer <key>'")
    try:
        key = key_from_authorization(header)
    except TokenRefused as refused:
        raise Unauthorized(str(refused)) from None
    if key is None:
        raise Unauthorized("the Authorization header must be 'Bearer <key>' or 'Token <key>'")
    digest = hash_key(key)
    found, refusal = cache.get(digest)
    if not found:
        refusal = await _check_key_async(key)
        cache.put(digest, refusal)
    if refusal is not None:
        raise Unauthorized(refusal)
    return True


async def _allow_all(scope: Mapping[str, Any]) -> bool:
    """Mode `none`: every /v2 request is served."""
    return True


def make_v2_authenticator(
    mode: str | None, listen_host: str | None = None, cache: TokenCache = token_cache
) -> V2Authenticator:
    """The /v2 hook for `mode` (token, none, or auto/None); logs which one is in force.

    In auto mode without a known `listen_host` the decision is taken per connection from the address it reached
    (scope['server']): loopback connections are open, any other address (or an unknown one) needs a token.
    """
    if mode is not None and mode.strip().lower() not in MODES:
        raise ValueError(f"INFERA_INFERENCE_AUTH must be one of token, none (or unset), got {mode!r}")
    explicit = mode is not None and mode.strip().lower() in ("token", "none")
    if explicit or listen_host is not None:
        resolved = resolve_mode(mode, listen_host)
        why = "INFERA_INFERENCE_AUTH" if explicit else f"auto: the server listens on {listen_host}"
        logger.info("inference auth for /v2: %s (%s)", resolved, why)
        if resolved == "none":
            return _allow_all

        async def verify(scope: Mapping[str, Any]) -> bool:
            return await verify_scope(scope, cache)

        return verify

    logger.info(
        "inference auth for /v2: auto (token on non-loopback addresses, none on loopback; "
        "set INFERA_INFERENCE_AUTH=token|none to fix it)"
    )

    async def verify_by_address(scope: Mapping[str, Any]) -> bool:
        server = scope.get("server")
        if server and is_loopback(server[0]):
            return True
        return await verify_scope(scope, cache)

    return verify_by_address


def v2_authenticator_from_settings() -> V2Authenticator:
    """The /v2 hook for this process: INFERA_INFERENCE_AUTH, and INFERA_LISTEN_HOST when the launcher set it."""
    from django.conf import settings

    configured = getattr(settings, "INFERA_INFERENCE_AUTH", "auto")
    return make_v2_authenticator(configured, listen_host=os.environ.get("INFERA_LISTEN_HOST") or None)
