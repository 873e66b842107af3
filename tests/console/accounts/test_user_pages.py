"""/users/: admins list, create, change role, deactivate, reset passwords and manage tokens of accounts."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from console.accounts.models import ApiToken
from console.accounts.roles import Role, role_of, set_role
from console.accounts.tokens import hash_key, issue_token
from tests.console.accounts.conftest import PASSWORD, make_user, signed_in

pytestmark = pytest.mark.django_db


def reload(user):
    return get_user_model().objects.get(pk=user.pk)


def test_it_lists_users_with_role_and_tokens(admin, viewer):
    issue_token(viewer, "ci")
    page = signed_in(admin).get("/users/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "vera" in html and "viewer" in html and "ada" in html
    assert 'name="csrfmiddlewaretoken"' in html


@pytest.mark.parametrize("role", [Role.OPERATOR, Role.VIEWER])
def test_it_refuses_the_user_pages_to_non_admins(db, role):
    assert signed_in(make_user(f"u-{role}", role)).get("/users/").status_code == 403


def test_an_inference_account_has_no_console_session_at_all(db):
    response = signed_in(make_user("u-inference", Role.INFERENCE)).get("/users/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_sends_anonymous_visitors_to_sign_in():
    response = Client().get("/users/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_it_creates_a_user_and_shows_the_generated_password_once(admin):
    response = signed_in(admin).post("/users/", {"username": "nina", "role": "operator", "password": ""})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    password = re.search(r'id="new-password">([^<]+)<', response.content.decode()).group(1)
    nina = get_user_model().objects.get(username="nina")
    assert role_of(nina) is Role.OPERATOR and nina.check_password(password)


def test_it_explains_a_refused_creation(admin):
    response = signed_in(admin).post("/users/", {"username": "ada", "role": "viewer"})
    assert "already exists" in response.content.decode()
    response = signed_in(admin).post("/users/", {"username": "weak", "role": "viewer", "password": "123"})
    assert "too short" in response.content.decode()
    assert not get_user_model().objects.filter(username="weak").exists()


def test_it_changes_a_role(admin, viewer):
    response = signed_in(admin).post(f"/users/{viewer.pk}/role/", {"role": "operator"}, follow=True)
    assert "&#x27;vera&#x27; is now operator" in response.content.decode()
    assert role_of(reload(viewer)) is Role.OPERATOR


def test_it_refuses_an_unknown_role(admin, viewer):
    signed_in(admin).post(f"/users/{viewer.pk}/role/", {"role": "root"})
    assert role_of(reload(viewer)) is Role.VIEWER


def test_it_deactivates_and_reactivates(admin, viewer):
    client = signed_in(admin)
    client.post(f"/users/{viewer.pk}/active/", {"active": "0"})
    assert not reload(viewer).is_active
    client.post(f"/users/{viewer.pk}/active/", {"active": "1"})
    assert reload(viewer).is_active


def test_it_protects_the_last_active_admin(admin):
    client = signed_in(admin)
    response = client.post(f"/users/{admin.pk}/role/", {"role": "viewer"}, follow=True)
    assert "last active admin" in response.content.decode()
    assert role_of(reload(admin)) is Role.ADMIN
    other = get_user_model().objects.create_user("second", password=PASSWORD)
    set_role(other, Role.ADMIN)
    response = signed_in(other).post(f"/users/{admin.pk}/active/", {"active": "0"})
    assert not reload(admin).is_active
    response = signed_in(other).post(f"/users/{other.pk}/role/", {"role": "viewer"}, follow=True)
    assert "last active admin" in response.content.decode()


def test_it_resets_a_password_showing_it_once(admin, viewer):
    response = signed_in(admin).post(f"/users/{viewer.pk}/password/")
    password = re.search(r'id="new-password">([^<]+)<', response.content.decode()).group(1)
    assert reload(viewer).check_password(password)
    assert "no-store" in response["Cache-Control"]


def test_it_issues_and_revokes_tokens_for_a_user(admin, inference):
    client = signed_in(admin)
    response = client.post(f"/users/{inference.pk}/tokens/", {"name": "camera-7", "expires_days": "90"})
    key = re.search(r'id="new-key">([^<]+)<', response.content.decode()).group(1)
    token = ApiToken.objects.get(user=inference)
    assert token.key_hash == hash_key(key) and token.expires is not None
    page = client.get(f"/users/{inference.pk}/").content.decode()
    assert "camera-7" in page and key not in page
    client.post(f"/users/{inference.pk}/tokens/{token.pk}/revoke/")
    assert ApiToken.objects.get(pk=token.pk).revoked


def test_it_refuses_a_token_without_a_name(admin, viewer):
    response = signed_in(admin).post(f"/users/{viewer.pk}/tokens/", {"name": ""})
    assert response.status_code == 400
    assert not ApiToken.objects.exists()


def test_it_lets_every_console_user_manage_own_tokens(viewer):
    client = signed_in(viewer)
    response = client.post("/tokens/", {"name": "notebook"})
    assert re.search(r'id="new-key">(ifr_[^<]+)<', response.content.decode())
    token = ApiToken.objects.get(user=viewer)
    client.post(f"/tokens/{token.pk}/revoke/")
    assert ApiToken.objects.get(pk=token.pk).revoked


def test_it_refuses_a_form_post_without_csrf_token(admin, viewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    response = client.post(f"/users/{viewer.pk}/role/", {"role": "admin"})
    assert response.status_code == 403
    assert role_of(reload(viewer)) is Role.VIEWER
    response = client.post("/users/", {"username": "sneaky", "role": "admin"})
    assert response.status_code == 403
    assert not get_user_model().objects.filter(username="sneaky").exists()


def test_it_accepts_a_form_post_with_its_csrf_token(admin, viewer):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    page = client.get(f"/users/{viewer.pk}/").content.decode()
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    client.post(f"/users/{viewer.pk}/role/", {"role": "operator", "csrfmiddlewaretoken": csrf})
    assert role_of(reload(viewer)) is Role.OPERATOR
