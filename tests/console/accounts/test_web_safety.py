"""Security headers on console responses, and the settings the accounts app reads from the environment."""

from __future__ import annotations

import pytest
from django.test import Client

from console.accounts.security_settings import logging_settings, rest_framework_settings
from console.config import read_settings
from console.env import EnvError

ENV = {"INFERA_VAR_DIR": "/tmp/infera-settings-test"}


@pytest.mark.django_db
def test_it_sends_security_headers_on_pages():
    response = Client().get("/accounts/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert "camera=()" in response["Permissions-Policy"]


def test_it_makes_cookies_secure_unless_debugging():
    assert read_settings(ENV).cookies_secure is True
    assert read_settings(ENV | {"INFERA_DEBUG": "true"}).cookies_secure is False


def test_it_lets_plain_http_deployments_turn_secure_cookies_off():
    assert read_settings(ENV | {"INFERA_SECURE_COOKIES": "false"}).cookies_secure is False


def test_it_reads_the_accounts_switches():
    values = read_settings(ENV)
    assert values.allow_python_models is True
    assert values.inference_auth == "auto"
    assert rest_framework_settings({})["DEFAULT_AUTHENTICATION_CLASSES"][0].endswith("TokenAuthentication")
    assert "mask_secrets" in logging_settings({"version": 1, "handlers": {"h": {}}})["handlers"]["h"]["filters"]
    environ = {"INFERA_ALLOW_PYTHON_MODELS": "no", "INFERA_INFERENCE_AUTH": "Token", "INFERA_API_RATE": "10/s"}
    values = read_settings(ENV | environ)
    assert values.allow_python_models is False
    assert values.inference_auth == "token"
    assert values.api_rate == "10/s"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFERA_ALLOW_PYTHON_MODELS", "maybe"),
        ("INFERA_INFERENCE_AUTH", "password"),
        ("INFERA_API_RATE", "lots"),
        ("INFERA_LOGIN_MAX_FAILURES", "0"),
    ],
)
def test_it_stops_on_a_bad_value_naming_the_variable(name, value):
    with pytest.raises(EnvError, match=name):
        read_settings(ENV | {name: value})


@pytest.mark.django_db
def test_the_settings_in_force_use_tokens_and_the_throttle(settings):
    assert "console.accounts.tokens.TokenAuthentication" in settings.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert "console.accounts.throttling.TokenRateThrottle" in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]
    assert settings.AUTHENTICATION_BACKENDS == ["console.accounts.login_throttle.ThrottledModelBackend"]
