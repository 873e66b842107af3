"""Tokens through a database outage: recent verdicts are honoured for a bounded time, unknown keys get 503."""

from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.utils import timezone

from console.accounts import inference_auth
from console.accounts.inference_auth import TokenCache, Verdict, make_v2_authenticator
from console.accounts.roles import Role
from engine.errors import Unauthorized, Unavailable
from engine.serving.admission import Principal
from tests.console.accounts.test_inference_auth import scope, user_with_token

db_async = pytest.mark.django_db(transaction=True)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def database_down(monkeypatch):
    """The token lookup fails as psycopg does when the server is gone (the real outage is in test_database_outage)."""

    def refuse(key: str):
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed: Connection refused')

    def take_down() -> None:
        monkeypatch.setattr(inference_auth, "_verdict_on_async", sync_to_async(refuse))

    return take_down


def test_it_keeps_a_verdict_for_outages_longer_than_it_trusts_it():
    clock = Clock()
    cache = TokenCache(ttl=5, grace=60, clock=clock)
    verdict = Verdict(Principal("ci", user_id=1, token_id=2))
    cache.put("k", verdict)
    clock.now += 6
    assert cache.get("k") is None  # too old to serve without asking the database
    assert cache.get_during_outage("k") == verdict
    clock.now += 55
    assert cache.get_during_outage("k") is None  # older than the grace: dropped


def test_it_does_not_keep_an_expired_token_through_an_outage():
    cache = TokenCache(ttl=5, grace=3600)
    cache.put("k", Verdict(Principal("ci", user_id=1, token_id=2), expires=timezone.now() - timedelta(seconds=1)))
    assert cache.get_during_outage("k") is None


def test_a_revocation_drops_the_verdict_kept_for_outages():
    clock = Clock()
    cache = TokenCache(ttl=5, grace=3600, clock=clock)
    cache.put("k", Verdict(Principal("ci", user_id=1, token_id=2)))
    clock.now += 10
    cache.forget_token(2)
    assert cache.get_during_outage("k") is None


@db_async
async def test_it_serves_a_recently_seen_token_while_the_database_is_down(database_down):
    clock = Clock()
    cache = TokenCache(ttl=5, grace=900, clock=clock)
    authenticate = make_v2_authenticator("token", cache=cache)
    _, key = await user_with_token(Role.INFERENCE, "seen")
    assert (await authenticate(scope(f"Bearer {key}"))).name.startswith("user-")
    database_down()
    clock.now += 60  # past the check interval: the database would be asked, and cannot answer
    principal = await authenticate(scope(f"Bearer {key}"))
    assert principal.token_id is not None and cache.database.down


@db_async
async def test_it_answers_503_for_a_token_it_cannot_check(database_down):
    authenticate = make_v2_authenticator("token", cache=TokenCache(ttl=5, grace=900))
    _, key = await user_with_token(Role.INFERENCE, "unseen")
    database_down()
    with pytest.raises(Unavailable, match="cannot check the API token: the database is unavailable") as refused:
        await authenticate(scope(f"Bearer {key}"))
    assert refused.value.status == 503


@db_async
async def test_it_still_refuses_a_token_it_refused_before_the_outage(database_down):
    clock = Clock()
    authenticate = make_v2_authenticator("token", cache=TokenCache(ttl=5, grace=900, clock=clock))
    token, key = await user_with_token(Role.INFERENCE, "old")
    await sync_to_async(token.revoke)()
    with pytest.raises(Unauthorized, match="revoked"):
        await authenticate(scope(f"Bearer {key}"))
    database_down()
    clock.now += 60
    with pytest.raises(Unauthorized, match="revoked"):
        await authenticate(scope(f"Bearer {key}"))


@db_async
async def test_it_logs_an_outage_once_and_its_end(database_down, monkeypatch, caplog):
    clock = Clock()
    cache = TokenCache(ttl=0, grace=900, clock=clock)
    authenticate = make_v2_authenticator("token", cache=cache)
    _, key = await user_with_token(Role.INFERENCE, "noisy")
    await authenticate(scope(f"Bearer {key}"))
    working = inference_auth._verdict_on_async
    database_down()
    with caplog.at_level("INFO", logger="console.outages"):
        for _ in range(3):
            clock.now += 1
            await authenticate(scope(f"Bearer {key}"))
        monkeypatch.setattr(inference_auth, "_verdict_on_async", working)
        clock.now += 1
        await authenticate(scope(f"Bearer {key}"))
    lines = [r.getMessage() for r in caplog.records if r.name == "console.outages"]
    assert len(lines) == 2 and "is unavailable" in lines[0] and "is back after" in lines[1]
    assert "(3 failed attempts)" in lines[1] and not cache.database.down
