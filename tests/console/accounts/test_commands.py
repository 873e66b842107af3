"""The shell commands: create_user and issue_token."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from console.accounts.models import ApiToken
from console.accounts.roles import Role, role_of
from tests.console.accounts.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_it_creates_a_user_with_a_role_and_password(db):
    output = run("create_user", "olga", "--role", "operator", "--password", PASSWORD)
    user = get_user_model().objects.get(username="olga")
    assert role_of(user) is Role.OPERATOR and user.check_password(PASSWORD)
    assert PASSWORD not in output


def test_it_prints_a_generated_password_once(db):
    output = run("create_user", "root2", "--role", "admin")
    password = output.strip().splitlines()[-1].split(": ", 1)[1]
    user = get_user_model().objects.get(username="root2")
    assert user.is_superuser and user.check_password(password)


def test_it_refuses_an_unknown_role_or_a_taken_name(viewer):
    with pytest.raises(CommandError):
        call_command("create_user", "x", "--role", "root")
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_user", "vera", "--role", "viewer")


def test_it_prints_the_key_alone_on_the_last_line(inference):
    output = run("issue_token", "ingo", "--name", "camera", "--expires-days", "7")
    key = output.rstrip("\n").splitlines()[-1]
    assert key.startswith("ifr_") and " " not in key
    token = ApiToken.objects.get(user=inference)
    assert token.name == "camera" and token.expires is not None


def test_the_printed_key_authenticates(viewer):
    key = run("issue_token", "vera").rstrip("\n").splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    assert client.get("/api/tokens/").status_code == 200


def test_it_refuses_unknown_users_and_bad_lifetimes(viewer):
    with pytest.raises(CommandError, match="no user named 'ghost'"):
        call_command("issue_token", "ghost")
    with pytest.raises(CommandError, match="--expires-days"):
        call_command("issue_token", "vera", "--expires-days", "0")
