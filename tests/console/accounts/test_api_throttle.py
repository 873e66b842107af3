"""Per-token throttling of the management API: over INFERA_API_RATE answers 429."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from console.accounts.tokens import issue_token

pytestmark = pytest.mark.django_db


def bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_it_answers_429_when_a_token_goes_over_its_rate(settings, viewer):
    settings.INFERA = settings.INFERA.replace(api_rate="3/min")
    _, key = issue_token(viewer, "busy")
    _, other_key = issue_token(viewer, "quiet")
    client = bearer(key)
    assert [client.get("/api/tokens/").status_code for _ in range(3)] == [200, 200, 200]
    refused = client.get("/api/tokens/")
    assert refused.status_code == 429
    assert "Retry-After" in refused.headers
    assert bearer(other_key).get("/api/tokens/").status_code == 200  # counted per token


def test_it_counts_an_anonymous_caller_by_its_address_whatever_x_forwarded_for_claims():
    from django.contrib.auth.models import AnonymousUser
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    from console.accounts.throttling import TokenRateThrottle

    def key_for(claimed: str) -> str:
        request = Request(APIRequestFactory().get("/api/", REMOTE_ADDR="192.0.2.10", HTTP_X_FORWARDED_FOR=claimed))
        request.user = AnonymousUser()
        return TokenRateThrottle().get_cache_key(request, None)

    # a trusted proxy's forwarding is applied before Django (console/forwarded.py); a client's own claim is not
    assert key_for("203.0.113.1") == key_for("203.0.113.2")
    assert "192.0.2.10" in key_for("203.0.113.1")
