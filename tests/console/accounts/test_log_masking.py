"""No key, Authorization value or password reaches the logs."""

from __future__ import annotations

import io
import logging

import pytest
from django.test import Client
from rest_framework.test import APIClient

from console.accounts.log_masking import SecretMaskingFilter, mask_secrets
from console.accounts.tokens import issue_token
from tests.console.accounts.conftest import PASSWORD


@pytest.mark.parametrize(
    "text",
    [
        "headers: {'Authorization': 'Bearer ifr_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG'}",
        "[(b'authorization', b'Token sEcReTsEcReTsEcReTsEcReT1234')]",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "the key ifr_abcdefghijklmnopqrstuvwxyz is in a message",
        "login with password=hunter2hunter2 failed",
    ],
)
def test_it_masks_keys_headers_and_passwords(text):
    masked = mask_secrets(text)
    for secret in ("abcdefghijklmnop", "sEcReT", "dXNlcjpw", "hunter2"):
        assert secret not in masked
    assert "***" in masked


def test_it_leaves_ordinary_messages_alone():
    text = "model 'resnet' version 3 loaded in 1.2 s; token bucket refilled"
    assert mask_secrets(text) == text


def test_the_filter_masks_messages_arguments_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretMaskingFilter())
    logger = logging.getLogger("tests.accounts.masking")
    logger.addHandler(handler)
    logger.propagate = False
    key = "ifr_" + "k" * 43
    try:
        logger.warning("request with %s", {"authorization": f"Bearer {key}"})
        try:
            raise ValueError(f"bad key {key}")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert key not in stream.getvalue() and "k" * 20 not in stream.getvalue()


def test_the_settings_put_the_filter_on_every_handler(settings):
    for handler in settings.LOGGING["handlers"].values():
        assert "mask_secrets" in handler["filters"]


@pytest.mark.django_db
def test_no_key_or_password_is_logged_while_using_tokens(caplog, viewer):
    caplog.set_level(logging.DEBUG)
    token, key = issue_token(viewer, "ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    client.get("/api/tokens/")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}x")
    client.get("/api/tokens/")
    token.revoke()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    client.get("/api/tokens/")
    Client().post("/accounts/login/", {"username": "vera", "password": PASSWORD + "wrong"})
    assert caplog.records  # the 401s and 403s were logged ...
    assert key not in caplog.text and key[4:20] not in caplog.text  # ... without the key
    assert PASSWORD not in caplog.text
