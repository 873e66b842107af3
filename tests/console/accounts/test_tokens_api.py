"""/api/tokens/: a user's own tokens, the key returned once, revocation."""

from __future__ import annotations

import pytest

from console.accounts.models import ApiToken
from console.accounts.tokens import hash_key, issue_token
from tests.console.accounts.conftest import api_client_for

pytestmark = pytest.mark.django_db


def test_it_creates_a_token_and_returns_the_key_once(operator):
    client = api_client_for(operator)
    response = client.post("/api/tokens/", {"name": "deploy", "expires_days": 30}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "active" and body["expires"] is not None
    assert ApiToken.objects.get(pk=body["id"]).key_hash == hash_key(body["key"])
    assert response.headers["Cache-Control"] == "no-store"
    listed = client.get("/api/tokens/").json()
    assert listed[0]["name"] == "deploy" and "key" not in listed[0]


def test_it_revokes_own_tokens_and_keeps_them_listed(operator):
    token, _ = issue_token(operator, "old")
    client = api_client_for(operator)
    assert client.delete(f"/api/tokens/{token.pk}/").status_code == 204
    assert client.get(f"/api/tokens/{token.pk}/").json()["status"] == "revoked"


def test_it_hides_other_users_tokens(operator, viewer):
    theirs, _ = issue_token(viewer, "theirs")
    client = api_client_for(operator)
    assert client.get("/api/tokens/").json() == []
    assert client.delete(f"/api/tokens/{theirs.pk}/").status_code == 404
    assert not ApiToken.objects.get(pk=theirs.pk).revoked


@pytest.mark.parametrize(
    "payload",
    [{}, {"name": ""}, {"name": "x", "expires_days": 0}, {"name": "x", "expires_days": "soon"}, ["not", "an object"]],
)
def test_it_answers_400_to_bad_token_requests(operator, payload):
    response = api_client_for(operator).post("/api/tokens/", payload, format="json")
    assert response.status_code == 400


def test_it_answers_400_to_malformed_json(operator):
    response = api_client_for(operator).post("/api/tokens/", b"{not json", content_type="application/json")
    assert response.status_code == 400
