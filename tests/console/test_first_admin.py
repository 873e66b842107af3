"""The first admin: made once when no admin exists, with the given or a generated password."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from console.accounts.first_admin import ensure_admin

pytestmark = pytest.mark.django_db


def test_it_creates_admin_with_a_generated_password():
    created = ensure_admin(None)
    assert created is not None and created.username == "admin"
    assert created.generated_password and len(created.generated_password) >= 12
    user = get_user_model().objects.get(username="admin")
    assert user.is_superuser and user.is_staff
    assert user.check_password(created.generated_password)


def test_it_uses_the_given_password_and_shows_none():
    created = ensure_admin("from-the-environment")
    assert created is not None and created.generated_password is None
    assert get_user_model().objects.get(username="admin").check_password("from-the-environment")


def test_it_does_nothing_when_an_admin_exists():
    get_user_model().objects.create_superuser("root", password="x")
    assert ensure_admin(None) is None
    assert not get_user_model().objects.filter(username="admin").exists()


def test_it_runs_twice_without_a_second_admin():
    ensure_admin(None)
    assert ensure_admin(None) is None
    assert get_user_model().objects.filter(is_superuser=True).count() == 1


def test_it_refuses_to_promote_an_ordinary_user_named_admin():
    get_user_model().objects.create_user("admin", password="x")
    with pytest.raises(RuntimeError, match="'admin' is taken by an ordinary user"):
        ensure_admin(None)
    assert not get_user_model().objects.get(username="admin").is_superuser
