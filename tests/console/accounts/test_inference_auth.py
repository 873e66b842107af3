"""The /v2 authenticator: modes, token checks from the ASGI scope, its cache, and the V2App answering 401."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from console.accounts.inference_auth import (
    TokenCache,
    Verdict,
    is_loopback,
    make_v2_authenticator,
    resolve_mode,
)
from console.accounts.models import ApiToken
from console.accounts.revocations import RevocationListener
from console.accounts.roles import Role
from console.accounts.tokens import issue_token
from engine.errors import Unauthorized
from engine.frontend import V2App
from engine.serving.server import InferenceServer
from tests.console.accounts.conftest import make_user

db_async = pytest.mark.django_db(transaction=True)


def scope(authorization: str | None = None, server: tuple[str, int] | None = ("10.1.2.3", 8000), path: str = "/v2"):
    headers = [(b"host", b"infera")]
    if authorization is not None:
        headers.append((b"authorization", authorization.encode()))
    return {"type": "http", "method": "GET", "path": path, "headers": headers, "server": server}


@sync_to_async
def user_with_token(role: Role | None, name: str = "ci", **kwargs):
    user = make_user(f"user-{role}", role)
    return issue_token(user, name, **kwargs)


@pytest.mark.parametrize(
    ("configured", "host", "mode"),
    [
        ("token", "127.0.0.1", "token"),
        ("none", "0.0.0.0", "none"),
        (None, "127.0.0.1", "none"),
        ("", "::1", "none"),
        ("auto", "localhost", "none"),
        (None, "0.0.0.0", "token"),
        (None, "10.0.0.5", "token"),
        (None, "::", "token"),
        (None, None, "token"),
    ],
)
def test_it_resolves_the_mode_from_setting_and_listen_address(configured, host, mode):
    assert resolve_mode(configured, host) == mode


def test_it_refuses_an_unknown_mode():
    with pytest.raises(ValueError, match="INFERA_INFERENCE_AUTH"):
        make_v2_authenticator("sometimes")


def test_it_tells_loopback_addresses_apart():
    assert is_loopback("127.0.0.2") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com") and not is_loopback(None)


@pytest.mark.parametrize(("mode", "host", "logged"), [("token", None, "token"), (None, "127.0.0.1", "none")])
def test_it_logs_which_mode_is_in_force(caplog, mode, host, logged):
    with caplog.at_level(logging.INFO, logger="console.accounts.inference_auth"):
        make_v2_authenticator(mode, listen_host=host)
    assert f"inference auth for /v2: {logged}" in caplog.text


async def test_it_lets_everything_through_in_mode_none():
    authenticate = make_v2_authenticator("none")
    caller = await authenticate(scope())
    assert caller.name == "anonymous" and not caller.may_change_models


@db_async
async def test_it_refuses_a_refused_key_even_where_no_key_is_needed():
    """The attack: a revoked key on an open connection was taken for nobody, and nobody was trusted."""
    token, key = await user_with_token(Role.OPERATOR, "gone")
    await sync_to_async(token.revoke)()
    for authenticate in (make_v2_authenticator("none"), make_v2_authenticator("auto")):
        with pytest.raises(Unauthorized, match="'gone' was revoked"):
            await authenticate(scope(f"Bearer {key}", server=("127.0.0.1", 8000)))
        with pytest.raises(Unauthorized, match="invalid API token"):
            await authenticate(scope("Bearer ifr_not-a-real-key-at-all-000000000000", server=("127.0.0.1", 8000)))


@db_async
@pytest.mark.parametrize("role", [Role.INFERENCE, Role.VIEWER, Role.OPERATOR, Role.ADMIN])
async def test_it_accepts_an_active_token_of_any_role(role):
    token, key = await user_with_token(role)
    authenticate = make_v2_authenticator("token")
    caller = await authenticate(scope(f"Bearer {key}"))
    assert (caller.role, caller.token_id) == (role.value, token.pk)
    assert (await authenticate(scope(f"Token {key}"))) == caller


@db_async
async def test_it_refuses_missing_wrong_revoked_and_expired_tokens():
    authenticate = make_v2_authenticator("token")
    with pytest.raises(Unauthorized, match="requires an API token"):
        await authenticate(scope())
    with pytest.raises(Unauthorized, match="must be 'Bearer <key>'"):
        await authenticate(scope("Basic dXNlcjpwYXNz"))
    with pytest.raises(Unauthorized, match="invalid API token"):
        await authenticate(scope("Bearer ifr_not-a-real-key-at-all-000000000000"))
    token, key = await user_with_token(Role.INFERENCE, "cam")
    await sync_to_async(token.revoke)()
    with pytest.raises(Unauthorized, match="'cam' was revoked"):
        await authenticate(scope(f"Bearer {key}"))
    expiring, expiring_key = await user_with_token(Role.VIEWER, "short", expires=timezone.now() + timedelta(days=1))
    await sync_to_async(ApiToken.objects.filter(pk=expiring.pk).update)(expires=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Unauthorized, match="'short' expired"):
        await authenticate(scope(f"Bearer {expiring_key}"))


@db_async
async def test_it_refuses_tokens_of_users_without_a_role():
    _, key = await user_with_token(None)
    with pytest.raises(Unauthorized, match="no role"):
        await make_v2_authenticator("token")(scope(f"Bearer {key}"))


@db_async
async def test_it_caches_verdicts_for_a_few_seconds():
    now = [1000.0]
    cache = TokenCache(ttl=5.0, clock=lambda: now[0])
    authenticate = make_v2_authenticator("token", cache=cache)
    token, key = await user_with_token(Role.INFERENCE)
    assert await authenticate(scope(f"Bearer {key}"))
    # revoked behind Django's back (no signal): the cached verdict holds until it expires, with no database trip
    await sync_to_async(ApiToken.objects.filter(pk=token.pk).update)(revoked_at=timezone.now())
    assert await authenticate(scope(f"Bearer {key}"))
    now[0] += 5.1
    with pytest.raises(Unauthorized, match="revoked"):
        await authenticate(scope(f"Bearer {key}"))


@db_async
async def test_a_revoked_token_is_refused_at_once(in_memory_layer):
    cache = TokenCache(ttl=3600)
    listener = RevocationListener(cache)
    await listener.start()
    try:
        authenticate = make_v2_authenticator("token", cache=cache)
        token, key = await user_with_token(Role.OPERATOR, "leaked")
        assert (await authenticate(scope(f"Bearer {key}"))).may_change_models
        await sync_to_async(token.revoke)()
        await listener.wait_for(1)
        with pytest.raises(Unauthorized, match="'leaked' was revoked"):
            await authenticate(scope(f"Bearer {key}"))
    finally:
        await listener.stop()


@db_async
async def test_a_role_change_reaches_a_cached_token_at_once(in_memory_layer):
    from console.accounts.roles import set_role

    cache = TokenCache(ttl=3600)
    listener = RevocationListener(cache)
    await listener.start()
    try:
        authenticate = make_v2_authenticator("token", cache=cache)
        token, key = await user_with_token(Role.OPERATOR, "ci")
        assert (await authenticate(scope(f"Bearer {key}"))).may_change_models
        seen = listener.seen
        await sync_to_async(set_role)(token.user, Role.VIEWER)
        await listener.wait_for(seen + 1)
        assert not (await authenticate(scope(f"Bearer {key}"))).may_change_models
    finally:
        await listener.stop()


def test_the_cache_keeps_a_bounded_number_of_entries():
    cache = TokenCache(ttl=60, size=2)
    for digest in ("a", "b", "c"):
        cache.put(digest, Verdict(None, "no"))
    assert cache.get("a") is None and cache.get("c") == Verdict(None, "no")


@db_async
async def test_it_decides_per_address_when_auto_has_no_listen_host():
    authenticate = make_v2_authenticator("auto")
    assert (await authenticate(scope(server=("127.0.0.1", 8000)))).name == "anonymous"
    with pytest.raises(Unauthorized):
        await authenticate(scope(server=("192.168.1.10", 8000)))
    with pytest.raises(Unauthorized):
        await authenticate(scope(server=None))  # a unix socket: unknown, so tokens


async def call(app, request_scope) -> tuple[int, dict[bytes, bytes], bytes]:
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app(request_scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


@db_async
async def test_the_v2_app_answers_401_but_keeps_health_open():
    server = InferenceServer()
    await server.start(load_models=False)
    try:
        app = V2App(server, authenticate=make_v2_authenticator("token"))
        _, key = await user_with_token(Role.INFERENCE)
        status, headers, body = await call(app, scope())
        assert status == 401 and headers[b"www-authenticate"].startswith(b"Bearer")
        assert "requires an API token" in json.loads(body)["error"]
        status, _, _ = await call(app, scope(f"Bearer {key}"))
        assert status == 200
        for path in ("/v2/health/live", "/v2/health/ready"):
            status, _, _ = await call(app, scope(path=path))
            assert status == 200
    finally:
        await server.stop()


@pytest.mark.parametrize(
    ("configured", "listen_host", "expected"),
    [("none", None, "none"), ("token", None, "token"), ("auto", "127.0.0.1", "none"), ("auto", "0.0.0.0", "token")],
)
def test_the_runtime_builds_the_hook_from_settings_and_the_listen_host(
    settings, caplog, configured, listen_host, expected
):
    from console.hosting.runtime import Runtime

    with caplog.at_level(logging.INFO, logger="console.accounts.inference_auth"):
        Runtime(settings.INFERA.replace(inference_auth=configured), listen_host=listen_host)
    assert f"inference auth for /v2: {expected} " in caplog.text
