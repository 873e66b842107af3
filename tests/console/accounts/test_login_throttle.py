"""Sign-in throttling: N failures per user name and address lock that pair, with a clear message."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.console.accounts.conftest import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN = "/accounts/login/"


def sign_in(password: str, address: str = "10.0.0.1", username: str = "vera"):
    return Client(REMOTE_ADDR=address).post(LOGIN, {"username": username, "password": password})


@pytest.fixture(autouse=True)
def three_failures(settings):
    settings.INFERA = settings.INFERA.replace(login_max_failures=3)
    settings.INFERA = settings.INFERA.replace(login_window_seconds=300)


def test_it_signs_in_with_the_right_password(viewer):
    assert sign_in(PASSWORD).status_code == 302


def test_it_locks_after_too_many_failures_even_with_the_right_password(viewer):
    for _ in range(2):
        assert "correct username and password" in sign_in("wrong").content.decode()
    third = sign_in("wrong").content.decode()
    assert "Too many failed sign-ins" in third
    locked = sign_in(PASSWORD)
    assert locked.status_code == 200
    assert "Too many failed sign-ins" in locked.content.decode()
    assert "5 minutes" in locked.content.decode()


def test_it_locks_only_that_user_from_that_address(viewer, operator):
    for _ in range(3):
        sign_in("wrong")
    assert sign_in(PASSWORD, address="10.0.0.2").status_code == 302
    assert sign_in(PASSWORD, username="otto").status_code == 302


def test_it_forgets_failures_after_a_successful_sign_in(viewer):
    for _ in range(2):
        sign_in("wrong")
    assert sign_in(PASSWORD).status_code == 302
    for _ in range(2):
        sign_in("wrong")
    assert sign_in(PASSWORD).status_code == 302


def test_it_locks_django_admin_sign_in_too(admin):
    client = Client(REMOTE_ADDR="10.0.0.9")
    for _ in range(3):
        client.post("/admin/login/", {"username": "ada", "password": "wrong"})
    response = client.post("/admin/login/", {"username": "ada", "password": PASSWORD})
    assert response.status_code == 200  # the form again: not signed in
    assert "_auth_user_id" not in client.session


def test_it_locks_an_address_that_tries_many_names(viewer):
    """The finding: lockout was per name only, so one address could try a password on every name."""
    for number in range(12):  # 3 allowed per name, 4 times that per address
        sign_in("wrong", username=f"guess-{number}")
    locked = sign_in(PASSWORD)
    assert locked.status_code == 200 and "Too many failed sign-ins from your address" in locked.content.decode()
    assert sign_in(PASSWORD, address="10.0.0.2").status_code == 302
