"""/api/users/: admins list, create, change and delete accounts under the same rules as the pages."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from console.accounts.roles import Role, role_of
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import api_client_for, make_user

pytestmark = pytest.mark.django_db


def test_it_lists_users_for_admins_only(admin, operator):
    body = api_client_for(admin).get("/api/users/").json()
    assert {row["username"]: row["role"] for row in body} == {"ada": "admin", "otto": "operator"}
    assert api_client_for(operator).get("/api/users/").status_code == 403


def test_it_works_with_an_admin_token(admin):
    _, key = issue_token(admin, "ops")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/users/").status_code == 200


def test_it_creates_a_user_returning_a_generated_password(admin):
    response = api_client_for(admin).post("/api/users/", {"username": "bo", "role": "viewer"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["role"] == "viewer"
    assert get_user_model().objects.get(username="bo").check_password(body["generated_password"])


@pytest.mark.parametrize(
    "payload",
    [{"username": "x", "role": "root"}, {"role": "viewer"}, {"username": "bad name!", "role": "viewer"}, "[]"],
)
def test_it_answers_400_to_bad_users(admin, payload):
    response = api_client_for(admin).post("/api/users/", payload, format="json")
    assert response.status_code == 400


def test_it_changes_role_and_state(admin, viewer):
    client = api_client_for(admin)
    response = client.patch(f"/api/users/{viewer.pk}/", {"role": "operator", "is_active": False}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["role"] == "operator" and response.json()["is_active"] is False


def test_it_refuses_to_demote_the_last_admin(admin):
    response = api_client_for(admin).patch(f"/api/users/{admin.pk}/", {"role": "viewer"}, format="json")
    assert response.status_code == 400
    assert "last active admin" in response.json()["detail"]
    assert role_of(get_user_model().objects.get(pk=admin.pk)) is Role.ADMIN


def test_it_deletes_users_but_not_the_last_admin(admin, viewer):
    client = api_client_for(admin)
    assert client.delete(f"/api/users/{viewer.pk}/").status_code == 204
    assert client.delete(f"/api/users/{admin.pk}/").status_code == 400
    other = make_user("second", Role.ADMIN)
    assert api_client_for(other).delete(f"/api/users/{admin.pk}/").status_code == 204
    assert api_client_for(other).delete(f"/api/users/{other.pk}/").status_code == 400


def test_it_answers_404_for_unknown_users(admin):
    assert api_client_for(admin).get("/api/users/999999/").status_code == 404
