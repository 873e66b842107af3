"""Sign-in throttling: too many failed passwords for one user name from one address locks that pair for a while.

Failures are counted from Django's `user_login_failed` signal, so the console login, Django admin and anything else
calling `authenticate()` count alike; the backend refuses a locked pair even with the right password, and the
console's login form says so in words. Counters live in Django's cache (per process unless a shared cache is set).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver
from django.http import HttpRequest

DEFAULT_MAX_FAILURES = 5
DEFAULT_WINDOW_SECONDS = 300


def max_failures() -> int:
    """Failed sign-ins allowed per user name and address within the window."""
    return int(getattr(settings, "INFERA_LOGIN_MAX_FAILURES", DEFAULT_MAX_FAILURES))


def window_seconds() -> int:
    """How long failures are remembered, and so how long a lock lasts."""
    return int(getattr(settings, "INFERA_LOGIN_WINDOW_SECONDS", DEFAULT_WINDOW_SECONDS))


def client_address(request: HttpRequest | None) -> str:
    """The address the request came from (the peer; proxies are not trusted for this)."""
    if request is None:
        return "unknown"
    return request.META.get("REMOTE_ADDR") or "unknown"


def _key(username: str, address: str) -> str:
    # hashed: user names may hold characters a cache backend refuses in keys
    digest = hashlib.sha256(f"{username.strip().lower()}\n{address}".encode()).hexdigest()
    return f"infera:login-failures:{digest}"


def failures(username: str, address: str) -> int:
    """Failed sign-ins counted for this pair in the current window."""
    return int(cache.get(_key(username, address), 0))


def is_locked(username: str, address: str) -> bool:
    """True when this pair has used up its failed sign-ins."""
    return failures(username, address) >= max_failures()


def record_failure(username: str, address: str) -> None:
    """Count one failed sign-in; the window starts at the first failure."""
    key = _key(username, address)
    if cache.add(key, 1, timeout=window_seconds()):
        return
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window_seconds())


def clear_failures(username: str, address: str) -> None:
    """Forget the failures of this pair (after a successful sign-in)."""
    cache.delete(_key(username, address))


def locked_message() -> str:
    """What a locked-out person reads."""
    minutes = max(1, round(window_seconds() / 60))
    return (
        f"Too many failed sign-ins for this user from your address. Sign-in is locked for up to {minutes} "
        f"minute{'s' if minutes != 1 else ''}; try again later."
    )


@receiver(user_login_failed, dispatch_uid="accounts.count_login_failure")
def count_login_failure(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any) -> None:
    """Signal receiver: count a failed sign-in against the user name and address."""
    username = credentials.get("username")
    if username:
        record_failure(str(username), client_address(request))


@receiver(user_logged_in, dispatch_uid="accounts.clear_login_failures")
def clear_login_failures(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    """Signal receiver: a successful sign-in clears the count."""
    clear_failures(user.get_username(), client_address(request))


class ThrottledModelBackend(ModelBackend):
    """Django's password backend, refusing a locked user name and address pair even with the right password."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if username is not None and is_locked(username, client_address(request)):
            raise PermissionDenied(locked_message())  # stops the other backends too
        return super().authenticate(request, username=username, password=password, **kwargs)


class ThrottledAuthenticationForm(AuthenticationForm):
    """The login form, saying plainly when sign-in is locked instead of 'wrong password'."""

    def clean(self) -> dict[str, Any]:
        username = self.cleaned_data.get("username")
        if username and is_locked(username, client_address(self.request)):
            raise ValidationError(locked_message(), code="locked")
        try:
            return super().clean()
        except ValidationError:
            if username and is_locked(username, client_address(self.request)):
                raise ValidationError(locked_message(), code="locked") from None
            raise
