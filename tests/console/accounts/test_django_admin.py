"""Django admin: API tokens listed and revoked there; the last active admin cannot be removed there either."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from console.accounts.models import ApiToken
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import signed_in

pytestmark = pytest.mark.django_db


def test_it_lists_tokens_without_keys(admin, viewer):
    _, key = issue_token(viewer, "ci")
    page = signed_in(admin).get("/admin/accounts/apitoken/")
    assert page.status_code == 200
    assert "ci" in page.content.decode() and key not in page.content.decode()


def test_it_revokes_tokens_with_the_action(admin, viewer):
    token, _ = issue_token(viewer, "ci")
    signed_in(admin).post(
        "/admin/accounts/apitoken/", {"action": "revoke_tokens", "_selected_action": [token.pk]}, follow=True
    )
    assert ApiToken.objects.get(pk=token.pk).revoked


def test_it_will_not_delete_the_last_admin(admin):
    response = signed_in(admin).post(f"/admin/auth/user/{admin.pk}/delete/", {"post": "yes"}, follow=True)
    assert "last active admin" in response.content.decode()
    assert get_user_model().objects.filter(pk=admin.pk).exists()


def test_it_will_not_deactivate_the_last_admin(admin):
    form = {
        "username": "ada",
        "is_active": "",
        "is_staff": "on",
        "is_superuser": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "initial-date_joined_0": "2026-01-01",
        "initial-date_joined_1": "00:00:00",
    }
    response = signed_in(admin).post(f"/admin/auth/user/{admin.pk}/change/", form)
    assert response.status_code == 200
    assert "last active admin" in response.content.decode()
    assert get_user_model().objects.get(pk=admin.pk).is_active
