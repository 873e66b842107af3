"""Accounts the server makes for itself: the first admin, so a fresh install can be signed into."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

ADMIN_USERNAME = "admin"


@dataclass(frozen=True)
class AdminCreated:
    """The admin just made; `generated_password` is set only when Infera chose it (to be shown once)."""

    username: str
    generated_password: str | None


def ensure_admin(password: str | None) -> AdminCreated | None:
    """Create the superuser `admin` when no active superuser exists; None when there is one already.

    `password` comes from INFERA_ADMIN_PASSWORD; without it a random one is generated for the caller to print.
    """
    users = get_user_model()
    if users.objects.filter(is_superuser=True, is_active=True).exists():
        return None
    if users.objects.filter(username=ADMIN_USERNAME).exists():
        # someone made an ordinary user called admin: promoting it silently would hand out rights
        raise RuntimeError(
            f"no active superuser exists and the name '{ADMIN_USERNAME}' is taken by an ordinary user; "
            "make one with `python manage.py createsuperuser`"
        )
    generated = None
    if not password:
        generated = password = secrets.token_urlsafe(12)
    try:
        with transaction.atomic():
            users.objects.create_superuser(ADMIN_USERNAME, email="", password=password)
    except IntegrityError:
        return None  # another replica starting at the same moment made it
    return AdminCreated(ADMIN_USERNAME, generated)
