"""Token budgets of users and tokens: set by admins only (API and pages), audited, carried by the caller's Principal,
and announced so every replica's cached verdict on that user or token is dropped at once."""

from __future__ import annotations

import pytest

from console.accounts.budgets import budgets_for, set_limits
from console.accounts.principals import principal_for
from console.accounts.tokens import issue_token
from console.audit.models import AuditEvent
from engine.api import Budget
from tests.console.accounts.conftest import api_client_for, signed_in

pytestmark = pytest.mark.django_db

UNSET = {"tokens_per_minute": None, "concurrent_streams": None, "max_tokens": None}


def test_an_admin_sets_a_users_budget_through_the_api(admin, inference):
    client = api_client_for(admin)
    assert client.get(f"/api/users/{inference.pk}/budget/").json() == UNSET
    answer = client.put(f"/api/users/{inference.pk}/budget/", {"tokens_per_minute": 1000}, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json() == UNSET | {"tokens_per_minute": 1000}
    answer = client.patch(f"/api/users/{inference.pk}/budget/", {"max_tokens": 64}, format="json")
    assert answer.json() == UNSET | {"tokens_per_minute": 1000, "max_tokens": 64}
    assert AuditEvent.objects.filter(action="user.budget", object="ingo").count() == 2


def test_an_admin_sets_any_tokens_budget_through_the_api(admin, inference):
    token, _ = issue_token(inference, "script")
    answer = api_client_for(admin).put(f"/api/tokens/{token.pk}/budget/", {"concurrent_streams": 2}, format="json")
    assert answer.status_code == 200 and answer.json()["concurrent_streams"] == 2
    assert AuditEvent.objects.filter(action="token.budget", object="ingo/script").exists()


@pytest.mark.parametrize("role", ["operator", "viewer", "inference"])
def test_no_one_but_an_admin_reads_or_sets_a_budget(request, role, admin):
    caller = request.getfixturevalue(role)
    token, _ = issue_token(caller, "own")
    client = api_client_for(caller)
    for path in (f"/api/users/{caller.pk}/budget/", f"/api/tokens/{token.pk}/budget/"):
        assert client.get(path).status_code == 403
        assert client.put(path, {"tokens_per_minute": 10**6}, format="json").status_code == 403
    assert budgets_for(caller, token) == ()


@pytest.mark.parametrize("limits", [{"tokens_per_minute": 0}, {"max_tokens": -1}, {"concurrent_streams": "many"}])
def test_a_limit_is_a_whole_number_from_one(admin, inference, limits):
    answer = api_client_for(admin).put(f"/api/users/{inference.pk}/budget/", limits, format="json")
    assert answer.status_code == 400


def test_the_principal_carries_the_users_and_the_tokens_budgets(admin, inference):
    token, _ = issue_token(inference, "script")
    set_limits(admin, inference, {"tokens_per_minute": 500})
    set_limits(admin, token, {"max_tokens": 32, "concurrent_streams": 1})
    principal = principal_for(inference, token)
    assert principal.budgets == (
        Budget(f"user:{inference.pk}", tokens_per_minute=500),
        Budget(f"token:{token.pk}", concurrent_streams=1, max_tokens=32),
    )
    set_limits(admin, token, {"max_tokens": None, "concurrent_streams": None})  # cleared: no budget left on it
    assert principal_for(inference, token).budgets == (Budget(f"user:{inference.pk}", tokens_per_minute=500),)


def test_setting_a_budget_announces_the_change_to_every_replica(admin, inference, monkeypatch):
    token, _ = issue_token(inference, "script")
    announced = []
    monkeypatch.setattr("console.accounts.budgets.announce", lambda **who: announced.append(who))
    set_limits(admin, inference, {"tokens_per_minute": 5})
    set_limits(admin, token, {"tokens_per_minute": 5})
    assert announced == [{"user_id": inference.pk}, {"token_id": token.pk}]


def test_an_admin_sets_budgets_on_the_users_page_and_the_tokens_page(admin, inference):
    token, _ = issue_token(inference, "script")
    client = signed_in(admin)
    page = client.get(f"/users/{inference.pk}/").content.decode()
    assert "Budget" in page and f"/users/{inference.pk}/tokens/{token.pk}/" in page
    answer = client.post(f"/users/{inference.pk}/budget/", {"tokens_per_minute": "900", "max_tokens": ""})
    assert answer.status_code == 302
    assert principal_for(inference).budgets == (Budget(f"user:{inference.pk}", tokens_per_minute=900),)
    assert client.get(f"/users/{inference.pk}/tokens/{token.pk}/").status_code == 200
    answer = client.post(f"/users/{inference.pk}/tokens/{token.pk}/", {"concurrent_streams": "2"})
    assert answer.status_code == 302
    assert principal_for(inference, token).budgets[-1] == Budget(f"token:{token.pk}", concurrent_streams=2)
    refused = client.post(f"/users/{inference.pk}/tokens/{token.pk}/", {"concurrent_streams": "0"})
    assert refused.status_code == 400


def test_the_budget_pages_are_for_admins_only(operator, inference):
    token, _ = issue_token(inference, "script")
    client = signed_in(operator)
    assert client.get(f"/users/{inference.pk}/tokens/{token.pk}/").status_code == 403
    assert client.post(f"/users/{inference.pk}/budget/", {"tokens_per_minute": "9"}).status_code == 403
    assert principal_for(inference).budgets == ()
