"""API tokens: issuing, checking, and the DRF authentication class for `Token <key>` and `Bearer <key>`.

A key is `ifr_` plus 43 random URL-safe characters. Only its SHA-256 is stored; the first characters are kept in
clear to find the row, and the hash is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from console.accounts import audit
from console.accounts.models import ApiToken

KEY_MARKER = "ifr_"
PREFIX_LENGTH = len(KEY_MARKER) + 8
AUTH_KEYWORDS = ("token", "bearer")
# last_used is a hint, not an audit log: one write a minute per token keeps busy clients from storming the database
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenRefused(Exception):
    """A presented key does not authenticate; the message says why in words safe to send back."""


class IssuedToken(NamedTuple):
    """A token just created and its key, which exists nowhere else after this."""

    token: ApiToken
    key: str


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def issue_token(
    user: AbstractBaseUser, name: str, expires: datetime | None = None, *, actor: Any = None
) -> IssuedToken:
    """Create a token for `user`; the returned key is shown once and never stored (nor audited)."""
    name = name.strip()
    if not name:
        raise ValueError("a token needs a name")
    if expires is not None and expires <= timezone.now():
        raise ValueError("a token's expiry must be in the future")
    key = KEY_MARKER + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user, name=name, prefix=key[:PREFIX_LENGTH], key_hash=hash_key(key), expires=expires
        )
        audit.record(
            actor if actor is not None else user,
            "token.issue",
            f"{user.get_username()}/{name}",
            prefix=token.prefix,
            expires=expires.isoformat() if expires else None,
        )
    return IssuedToken(token, key)


def find_token(key: str) -> ApiToken:
    """The active token whose key is `key`; TokenRefused says whether it is wrong, revoked, expired or its user off."""
    key = key.strip()
    presented = hash_key(key)
    candidates = ApiToken.objects.select_related("user").filter(prefix=key[:PREFIX_LENGTH])
    token = next((row for row in candidates if hmac.compare_digest(row.key_hash, presented)), None)
    if token is None:
        raise TokenRefused("invalid API token")
    if token.revoked:
        raise TokenRefused(f"API token '{token.name}' was revoked")
    now = timezone.now()
    if token.is_expired(now):
        raise TokenRefused(f"API token '{token.name}' expired at {token.expires:%Y-%m-%d %H:%M} UTC")
    if not token.user.is_active:
        raise TokenRefused(f"API token '{token.name}' belongs to a deactivated user")
    touch_last_used(token, now)
    return token


def touch_last_used(token: ApiToken, now: datetime) -> None:
    """Record use, at most once per LAST_USED_RESOLUTION per token."""
    if token.last_used is not None and now - token.last_used < LAST_USED_RESOLUTION:
        return
    token.last_used = now
    ApiToken.objects.filter(pk=token.pk).update(last_used=now)


def key_from_authorization(value: str) -> str | None:
    """The key in an Authorization header value (`Token <key>` or `Bearer <key>`), None for other schemes.

    Raises TokenRefused when the scheme is ours but the value is malformed.
    """
    parts = value.split()
    if not parts or parts[0].lower() not in AUTH_KEYWORDS:
        return None
    if len(parts) != 2:
        raise TokenRefused(f"the Authorization header must be '{parts[0]} <key>' with the key and no spaces")
    return parts[1]


class TokenAuthentication(BaseAuthentication):
    """DRF authentication by `Authorization: Token <key>` or `Bearer <key>`; a refused key answers 401."""

    def authenticate(self, request: Any) -> tuple[AbstractBaseUser, ApiToken] | None:
        header = get_authorization_header(request)
        if not header:
            return None
        try:
            key = key_from_authorization(header.decode("latin-1"))
            if key is None:
                return None
            token = find_token(key)
        except TokenRefused as refused:
            raise exceptions.AuthenticationFailed(str(refused)) from None
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        # a WWW-Authenticate value makes DRF answer 401 rather than 403
        return 'Bearer realm="infera"'
