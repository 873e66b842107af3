"""Who sends each /v2 request: the authenticator the engine's front end awaits, returning a Principal.

`make_v2_authenticator(mode)` returns the async hook the V2App awaits with each request's ASGI scope (health
endpoints are never passed to it). It returns the caller as an engine Principal (user, role, token id, and what
they may do) or raises Unauthorized (401). Mode `token` demands an active token of any role; `none` serves callers
without a token as `anonymous`; `auto` (INFERA_INFERENCE_AUTH unset) means `token` when the server listens on a
non-loopback address and `none` on loopback. In every mode a presented key must be valid: a wrong, revoked or
expired key is refused, never taken for an anonymous caller. Anonymous callers may change models only when
INFERA_OPEN_REPOSITORY_CONTROL says so. Verified keys are cached for a few seconds in the runtime's TokenCache;
revoking a token, or changing its user, drops its entry at once (console/accounts/revocations.py).

When the database cannot be reached, inference goes on: a key verified within INFERA_TOKEN_GRACE_SECONDS (15
minutes by default) is still honoured, unless it was revoked meanwhile or its expiry passes; a key not seen that
recently gets 503 (it cannot be checked), never a 401 (it may well be valid).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from channels.db import database_sync_to_async
from django.utils import timezone

from console.accounts.principals import anonymous_principal, principal_for
from console.accounts.tokens import TokenRefused, find_token, hash_key, key_from_authorization
from console.outages import Outage, is_database_outage
from engine.api import Principal, Unauthorized, Unavailable

logger = logging.getLogger("console.accounts.inference_auth")

MODES = ("token", "none", "auto")
CACHE_SECONDS = 5.0
CACHE_ENTRIES = 4096
GRACE_SECONDS = 900  # INFERA_TOKEN_GRACE_SECONDS: how old a verdict may be that a database outage still honours

V2Authenticator = Callable[[Mapping[str, Any]], Awaitable[Principal]]


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


@dataclass(frozen=True)
class Verdict:
    """What a presented key was found to be: a principal, or the reason it is refused."""

    principal: Principal | None
    refusal: str | None = None
    expires: datetime | None = None  # the token's own expiry: a verdict kept through an outage ends there


class TokenCache:
    """Verdicts on presented keys (by their hash), fresh for `ttl` seconds and kept `grace` seconds for outages.

    `get` answers with fresh verdicts only; `get_during_outage` also with older ones, up to `grace` seconds, while
    the database cannot be asked. `forget_token`/`forget_user` drop verdicts of either age at once.
    """

    def __init__(
        self,
        ttl: float = CACHE_SECONDS,
        size: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        grace: float = GRACE_SECONDS,
    ):
        self.ttl = ttl
        self.size = size
        self.clock = clock
        self.grace = max(grace, ttl)
        self.database = Outage("the database (API token checks)")
        self._entries: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()  # digest -> (checked at, verdict)

    def get(self, digest: str) -> Verdict | None:
        """The fresh verdict on one key, or None when there is none (or it is older than `ttl`)."""
        return self._younger_than(digest, self.ttl)

    def get_during_outage(self, digest: str) -> Verdict | None:
        """A verdict up to `grace` seconds old while the database is down; None when none, or its token expired."""
        verdict = self._younger_than(digest, self.grace)
        if verdict is not None and verdict.expires is not None and verdict.expires <= timezone.now():
            return None
        return verdict

    def _younger_than(self, digest: str, age: float) -> Verdict | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if entry[0] + self.grace <= self.clock():
            self._entries.pop(digest, None)
            return None
        return entry[1] if entry[0] + age > self.clock() else None

    def put(self, digest: str, verdict: Verdict) -> None:
        """Remember the verdict on one key, dropping the oldest entry when full."""
        self._entries[digest] = (self.clock(), verdict)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def forget_token(self, token_id: int) -> None:
        """Drop the verdict on one token (revoked, expiry changed, deleted)."""
        self._forget(lambda p: p.token_id == token_id)

    def forget_user(self, user_id: int) -> None:
        """Drop the verdicts on every token of one user (role changed, deactivated, deleted)."""
        self._forget(lambda p: p.user_id == user_id)

    def _forget(self, matches: Callable[[Principal], bool]) -> None:
        for digest, (_, verdict) in list(self._entries.items()):
            if verdict.principal is not None and matches(verdict.principal):
                self._entries.pop(digest, None)

    def clear(self) -> None:
        """Forget every verdict."""
        self._entries.clear()


def _verdict_on(key: str) -> Verdict:
    """The principal `key` authenticates, or why it is refused (it must be active and its user must have a role)."""
    try:
        token = find_token(key)
    except TokenRefused as refused:
        return Verdict(None, str(refused))
    principal = principal_for(token.user, token)
    if not principal.role:
        return Verdict(None, f"API token '{token.name}' belongs to a user with no role")
    return Verdict(principal, expires=token.expires)


_verdict_on_async = database_sync_to_async(_verdict_on)


def authorization_from_scope(scope: Mapping[str, Any]) -> str | None:
    """The Authorization header of an ASGI HTTP scope, decoded, or None."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            return value.decode("latin-1")
    return None


async def principal_from_scope(scope: Mapping[str, Any], cache: TokenCache) -> Principal | None:
    """The principal of the key the scope carries, None when it carries none; Unauthorized for a refused key."""
    header = authorization_from_scope(scope)
    if header is None:
        return None
    try:
        key = key_from_authorization(header)
    except TokenRefused as refused:
        raise Unauthorized(str(refused)) from None
    if key is None:
        raise Unauthorized("the Authorization header must be 'Bearer <key>' or 'Token <key>'")
    digest = hash_key(key)
    verdict = cache.get(digest) or await _checked_verdict(key, digest, cache)
    if verdict.principal is None:
        raise Unauthorized(verdict.refusal or "invalid API token")
    return verdict.principal


async def _checked_verdict(key: str, digest: str, cache: TokenCache) -> Verdict:
    """The database's verdict on `key`, cached; during a database outage a recent verdict, or 503."""
    try:
        verdict = await _verdict_on_async(key)
    except Exception as exc:
        if not is_database_outage(exc):
            raise
        cache.database.failed(exc)
        kept = cache.get_during_outage(digest)
        if kept is None:
            raise Unavailable(
                "cannot check the API token: the database is unavailable (tokens used in the last "
                f"{cache.grace / 60:.0f} minutes keep working); retry shortly"
            ) from None
        return kept
    cache.database.recovered()
    cache.put(digest, verdict)
    return verdict


async def verify_scope(scope: Mapping[str, Any], cache: TokenCache) -> Principal:
    """The principal of the scope's active token; Unauthorized saying what is wrong otherwise."""
    principal = await principal_from_scope(scope, cache)
    if principal is None:
        raise Unauthorized("this server requires an API token: send 'Authorization: Bearer <key>'")
    return principal


def make_v2_authenticator(
    mode: str | None,
    listen_host: str | None = None,
    cache: TokenCache | None = None,
    *,
    open_repository: bool = False,
    open_code: bool = False,
) -> V2Authenticator:
    """The /v2 hook for `mode` (token, none, or auto/None); logs which one is in force.

    In auto mode without a known `listen_host` the decision is taken per connection from the address it reached
    (scope['server']): loopback connections are open, any other address (or an unknown one) needs a token.
    `open_repository` lets callers without a token load and unload models (INFERA_OPEN_REPOSITORY_CONTROL), and
    `open_code` models that run code too (INFERA_OPEN_REPOSITORY_CONTROL_ALLOWS_CODE).
    """
    if mode is not None and mode.strip().lower() not in MODES:
        raise ValueError(f"INFERA_INFERENCE_AUTH must be one of token, none (or unset), got {mode!r}")
    cache = cache if cache is not None else TokenCache()
    anonymous = anonymous_principal(open_repository, open_code)
    explicit = mode is not None and mode.strip().lower() in ("token", "none")

    async def open_or_token(scope: Mapping[str, Any]) -> Principal:
        principal = await principal_from_scope(scope, cache)
        return anonymous if principal is None else principal

    async def token_only(scope: Mapping[str, Any]) -> Principal:
        return await verify_scope(scope, cache)

    if explicit or listen_host is not None:
        resolved = resolve_mode(mode, listen_host)
        why = "INFERA_INFERENCE_AUTH" if explicit else f"auto: the server listens on {listen_host}"
        logger.info("inference auth for /v2: %s (%s)", resolved, why)
        return open_or_token if resolved == "none" else token_only

    logger.info(
        "inference auth for /v2: auto (token on non-loopback addresses, none on loopback; "
        "set INFERA_INFERENCE_AUTH=token|none to fix it)"
    )

    async def by_address(scope: Mapping[str, Any]) -> Principal:
        server = scope.get("server")
        if server and is_loopback(server[0]):
            return await open_or_token(scope)
        return await token_only(scope)

    return by_address
