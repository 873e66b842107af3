"""/users/ sorts by a column header and filters by a word, a role and a state (console/accounts/forms.py)."""

from __future__ import annotations

import re

import pytest

from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import make_user, signed_in

pytestmark = pytest.mark.django_db


def listed(html: str) -> list[str]:
    body = html.split('<table id="users">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<a href="/users/\d+/">([^<]+)</a>', body)


@pytest.fixture
def cast(admin):
    """ada (admin), otto (operator, 2 tokens), vera (viewer, deactivated), ingo (inference), nemo (no role)."""
    otto = make_user("otto", Role.OPERATOR)
    issue_token(otto, "one")
    issue_token(otto, "two")
    vera = make_user("vera", Role.VIEWER, active=False)
    vera.email = "vera@example.org"
    vera.save(update_fields=["email"])
    make_user("ingo", Role.INFERENCE)
    make_user("nemo", None)
    return signed_in(admin)


def test_it_sorts_users_by_a_column_header(cast):
    assert listed(cast.get("/users/").content.decode()) == ["ada", "ingo", "nemo", "otto", "vera"]
    assert listed(cast.get("/users/", {"sort": "role"}).content.decode()) == ["ada", "otto", "vera", "ingo", "nemo"]
    assert listed(cast.get("/users/", {"sort": "-tokens"}).content.decode())[0] == "otto"
    assert listed(cast.get("/users/", {"sort": "-user"}).content.decode())[0] == "vera"


def test_it_filters_users_by_word_role_and_state(cast):
    assert listed(cast.get("/users/", {"q": "OT"}).content.decode()) == ["otto"]
    assert listed(cast.get("/users/", {"q": "example.org"}).content.decode()) == ["vera"]
    assert listed(cast.get("/users/", {"role": "none"}).content.decode()) == ["nemo"]
    assert listed(cast.get("/users/", {"state": "deactivated"}).content.decode()) == ["vera"]
    empty = cast.get("/users/", {"role": "viewer", "state": "active"}).content.decode()
    assert listed(empty) == [] and "No user matches these filters." in empty
