"""Schemathesis against the registry API (models, versions, actions, audit): junk answers 4xx, never 500."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error

from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import make_user
from tests.console.api_schema import api_schema

schema = api_schema(r"^/api/(models|audit)/")


@pytest.fixture
def admin_key(db, settings, wsgi_keeps_test_connection):
    """An admin's token (every operation allowed, so the inputs are what gets fuzzed), and no 429s."""
    settings.INFERA = settings.INFERA.replace(api_rate="100000/min")
    _, key = issue_token(make_user("fuzz-admin", Role.ADMIN), "fuzz")
    return key


@schema.parametrize()
@hypothesis_settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_it_never_answers_500(case, admin_key):
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_key}"}, checks=[not_a_server_error])
