"""A small cast of users, one per role, built in code."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from rest_framework.test import APIClient

from console.accounts.roles import Role, set_role

PASSWORD = "a-long-test-password-9"


def make_user(username: str, role: Role | None, *, password: str = PASSWORD, active: bool = True):
    """A user with `role` (None: no role at all)."""
    user = get_user_model().objects.create_user(username, password=password, is_active=active)
    if role is not None:
        set_role(user, role)
    return user


@pytest.fixture(autouse=True)
def clean_caches():
    """Throttle counters never leak from one test into another (each /v2 authenticator has its own token cache)."""
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def admin(db):
    return make_user("ada", Role.ADMIN)


@pytest.fixture
def operator(db):
    return make_user("otto", Role.OPERATOR)


@pytest.fixture
def viewer(db):
    return make_user("vera", Role.VIEWER)


@pytest.fixture
def inference(db):
    return make_user("ingo", Role.INFERENCE)


def signed_in(user) -> Client:
    """A test client with `user` signed into the console."""
    client = Client()
    client.force_login(user)
    return client


def api_client_for(user) -> APIClient:
    """An API client authenticated as `user` (no token involved)."""
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def wsgi_keeps_test_connection():
    """Let a real WSGI app (schemathesis' from_wsgi) run inside a test's transaction, as Django's test client does.

    Django closes the database connection when a request finishes; on PostgreSQL that would close the test's own
    connection mid-test (an in-memory SQLite one is never closed, which hides it).
    """
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
