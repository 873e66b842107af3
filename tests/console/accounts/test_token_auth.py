"""API tokens on the management API: Token and Bearer, refusals that say why, last_used bookkeeping."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from console.accounts.models import ApiToken
from console.accounts.roles import Role
from console.accounts.tokens import KEY_MARKER, hash_key, issue_token
from tests.console.accounts.conftest import make_user

pytestmark = pytest.mark.django_db

TOKENS_URL = "/api/tokens/"


def get_with(header: str | None) -> object:
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    return client.get(TOKENS_URL)


def test_it_stores_only_the_hash_of_the_key(viewer):
    token, key = issue_token(viewer, "ci")
    assert key.startswith(KEY_MARKER) and len(key) >= 40
    stored = ApiToken.objects.get(pk=token.pk)
    assert stored.key_hash == hash_key(key)
    assert key not in {stored.prefix, stored.key_hash, stored.name}


@pytest.mark.parametrize("scheme", ["Token", "Bearer", "bearer"])
def test_it_authenticates_token_and_bearer_headers(viewer, scheme):
    _, key = issue_token(viewer, "ci")
    response = get_with(f"{scheme} {key}")
    assert response.status_code == 200, response.content
    assert [row["name"] for row in response.json()] == ["ci"]


def test_it_refuses_a_wrong_key_with_401(viewer):
    _, key = issue_token(viewer, "ci")
    response = get_with(f"Bearer {key[:-2]}xx")
    assert response.status_code == 401
    assert response.json()["detail"] == "invalid API token"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_it_says_a_revoked_token_was_revoked(viewer):
    token, key = issue_token(viewer, "laptop")
    token.revoke()
    response = get_with(f"Token {key}")
    assert response.status_code == 401
    assert response.json()["detail"] == "API token 'laptop' was revoked"


def test_it_says_an_expired_token_expired(viewer):
    token, key = issue_token(viewer, "short", expires=timezone.now() + timedelta(days=1))
    ApiToken.objects.filter(pk=token.pk).update(expires=timezone.now() - timedelta(minutes=1))
    response = get_with(f"Bearer {key}")
    assert response.status_code == 401
    assert response.json()["detail"].startswith("API token 'short' expired at ")


def test_it_refuses_tokens_of_deactivated_users(viewer):
    _, key = issue_token(viewer, "ci")
    viewer.is_active = False
    viewer.save()
    response = get_with(f"Bearer {key}")
    assert response.status_code == 401
    assert "deactivated" in response.json()["detail"]


def test_it_refuses_a_malformed_header(viewer):
    response = get_with("Bearer two words")
    assert response.status_code == 401
    assert "Authorization header" in response.json()["detail"]


def test_it_answers_401_without_credentials():
    assert get_with(None).status_code == 401


def test_it_records_last_used_at_most_once_a_minute(viewer):
    token, key = issue_token(viewer, "ci")
    assert token.last_used is None
    get_with(f"Bearer {key}")
    first = ApiToken.objects.get(pk=token.pk).last_used
    assert first is not None
    get_with(f"Bearer {key}")
    assert ApiToken.objects.get(pk=token.pk).last_used == first
    ApiToken.objects.filter(pk=token.pk).update(last_used=first - timedelta(minutes=2))
    get_with(f"Bearer {key}")
    assert ApiToken.objects.get(pk=token.pk).last_used > first - timedelta(minutes=2)


def test_it_keeps_inference_tokens_off_the_management_api(inference):
    _, key = issue_token(inference, "client")
    response = get_with(f"Bearer {key}")
    assert response.status_code == 403


def test_it_refuses_to_issue_a_token_without_a_name_or_expired(viewer):
    with pytest.raises(ValueError, match="name"):
        issue_token(viewer, "  ")
    with pytest.raises(ValueError, match="future"):
        issue_token(viewer, "old", expires=timezone.now() - timedelta(seconds=1))


def test_it_finds_the_right_token_when_prefixes_collide(viewer):
    other = make_user("other", Role.VIEWER)
    token, key = issue_token(viewer, "mine")
    decoy, _ = issue_token(other, "theirs")
    ApiToken.objects.filter(pk=decoy.pk).update(prefix=token.prefix)
    response = get_with(f"Bearer {key}")
    assert [row["name"] for row in response.json()] == ["mine"]
