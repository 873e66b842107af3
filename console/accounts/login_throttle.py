"""Sign-in throttling: too many failed passwords for one user name from one address locks that pair for a while,
and many more from one address, whatever the names tried, lock the address (a spray over many names).

Failures are counted from Django's `user_login_failed` signal, so the console login, Django admin and anything else
calling `authenticate()` count alike; the backend refuses a locked pair even with the right password, and the
console's login form says so in words. Counters live in Django's cache (per process unless a shared cache is set).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.hashers import check_password, identify_hasher, make_password
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.core.exceptions import PermissionDenied, ValidationError
from django.dispatch import receiver
from django.http import HttpRequest


def max_failures() -> int:
    """Failed sign-ins allowed per user name and address within the window."""
    return settings.INFERA.login_max_failures


def window_seconds() -> int:
    """How long failures are remembered, and so how long a lock lasts."""
    return settings.INFERA.login_window_seconds


def client_address(request: HttpRequest | None) -> str:
    """The address the request came from: the peer, or the client a trusted proxy forwarded for
    (INFERA_TRUSTED_PROXIES, console/forwarded.py)."""
    if request is None:
        return "unknown"
    return request.META.get("REMOTE_ADDR") or "unknown"


# an address may fail this many times the per-name limit, over all names, before it is locked as a whole
ADDRESS_FACTOR = 4


def _address_key(address: str) -> str:
    return "infera:login-failures-address:" + hashlib.sha256(address.encode()).hexdigest()


def _key(username: str, address: str) -> str:
    # hashed: user names may hold characters a cache backend refuses in keys
    digest = hashlib.sha256(f"{username.strip().lower()}\n{address}".encode()).hexdigest()
    return f"infera:login-failures:{digest}"


def failures(username: str, address: str) -> int:
    """Failed sign-ins counted for this pair in the current window."""
    return int(cache.get(_key(username, address), 0))


def is_locked(username: str, address: str) -> bool:
    """True when this pair, or this address as a whole, has used up its failed sign-ins."""
    if failures(username, address) >= max_failures():
        return True
    return int(cache.get(_address_key(address), 0)) >= max_failures() * ADDRESS_FACTOR


def record_failure(username: str, address: str) -> None:
    """Count one failed sign-in for the pair and for the address; each window starts at its first failure."""
    for key in (_key(username, address), _address_key(address)):
        if cache.add(key, 1, timeout=window_seconds()):
            continue
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
        f"Too many failed sign-ins from your address. Sign-in is locked for up to {minutes} "
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
    """Django's password backend, refusing a locked user name and address pair even with the right password.

    An inference-role account is a client of /v2 with tokens: a password it may have been given does not open the
    console or Django admin, and a session it had ends at its next request.
    """

    def user_can_authenticate(self, user: Any) -> bool:
        from console.accounts.roles import Role, role_of

        return super().user_can_authenticate(user) and role_of(user) is not Role.INFERENCE

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, password: str | None = None, **kwargs: Any
    ) -> Any:
        if username is not None and is_locked(username, client_address(request)):
            raise PermissionDenied(locked_message())  # stops the other backends too
        checked = getattr(request, PASSWORD_CHECKED, None)
        if checked is not None and username is not None and checked[0] == username:
            return self._with_checked_password(username, password, checked[1])
        return super().authenticate(request, username=username, password=password, **kwargs)

    def _with_checked_password(self, username: str, password: str | None, matches: bool) -> Any:
        """The sign-in page hashed the password already, on a thread of its own (console/accounts/login_view.py)."""
        users = get_user_model()
        try:
            user = users._default_manager.get_by_natural_key(username)
        except users.DoesNotExist:
            return None
        if not matches or not self.user_can_authenticate(user):
            return None
        if password is not None and identify_hasher(user.password).must_update(user.password):
            user.set_password(password)  # as Django does: move an old hash to the current hasher
            user.save(update_fields=["password"])
        return user


# the request attribute the sign-in page sets: (user name, whether the password matched its stored hash)
# bandit B105 below: an attribute name, not a password
PASSWORD_CHECKED = "infera_password_checked"  # nosec B105


def stored_password(username: str) -> str | None:
    """The stored password hash of `username`, or None for an unknown name (a database read)."""
    users = get_user_model()
    try:
        return users._default_manager.get_by_natural_key(username).password
    except users.DoesNotExist:
        return None


def password_matches(password: str, encoded: str | None) -> bool:
    """The expensive part of a sign-in, with no database access; an unknown name costs one hash all the same."""
    if encoded is None:
        make_password(password)  # as Django's ModelBackend: unknown names take as long as known ones
        return False
    return check_password(password, encoded)


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
