"""Schemathesis against the users, tokens and usage API (from its OpenAPI schema): junk answers 4xx, never 500."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import not_a_server_error

from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import make_user
from tests.console.api_schema import api_schema

schema = api_schema(r"^/api/(users|tokens|usage)/")


@pytest.fixture
def admin_key(db, settings_override, wsgi_keeps_test_connection):
    """A token of an admin (every operation is allowed, so the bodies are what gets fuzzed)."""
    _, key = issue_token(make_user("fuzz-admin", Role.ADMIN), "fuzz")
    make_user("fuzz-viewer", Role.VIEWER)
    return key


@pytest.fixture
def settings_override(settings):
    """No 429s: the fuzzer is one token sending many requests."""
    settings.INFERA = settings.INFERA.replace(api_rate="100000/min")


@schema.parametrize()
@hypothesis_settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_it_never_answers_500(case, admin_key):
    case.call_and_validate(headers={"Authorization": f"Bearer {admin_key}"}, checks=[not_a_server_error])
