"""Security headers on console responses, and the settings the accounts app reads from the environment."""

from __future__ import annotations

import pytest
from django.test import Client

from console.accounts.security_settings import accounts_settings, cookie_and_header_settings
from console.env import EnvError

BASE = {"rest_framework": {}, "logging_config": {"version": 1, "handlers": {"h": {}}}}


@pytest.mark.django_db
def test_it_sends_security_headers_on_pages():
    response = Client().get("/accounts/login/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert "camera=()" in response["Permissions-Policy"]


def test_it_makes_cookies_secure_unless_debugging():
    assert cookie_and_header_settings(debug=False)["SESSION_COOKIE_SECURE"] is True
    assert cookie_and_header_settings(debug=False)["CSRF_COOKIE_SECURE"] is True
    assert cookie_and_header_settings(debug=True)["SESSION_COOKIE_SECURE"] is False


def test_it_lets_plain_http_deployments_turn_secure_cookies_off():
    values = accounts_settings(debug=False, environ={"INFERA_SECURE_COOKIES": "false"}, **BASE)
    assert values["SESSION_COOKIE_SECURE"] is False


def test_it_reads_the_accounts_switches():
    values = accounts_settings(debug=False, environ={}, **BASE)
    assert values["INFERA_ALLOW_PYTHON_MODELS"] is True
    assert values["INFERA_INFERENCE_AUTH"] == "auto"
    assert values["REST_FRAMEWORK"]["DEFAULT_AUTHENTICATION_CLASSES"][0].endswith("TokenAuthentication")
    assert values["LOGGING"]["handlers"]["h"]["filters"] == ["mask_secrets"]
    environ = {"INFERA_ALLOW_PYTHON_MODELS": "no", "INFERA_INFERENCE_AUTH": "Token", "INFERA_API_RATE": "10/s"}
    values = accounts_settings(debug=False, environ=environ, **BASE)
    assert values["INFERA_ALLOW_PYTHON_MODELS"] is False
    assert values["INFERA_INFERENCE_AUTH"] == "token"
    assert values["INFERA_API_RATE"] == "10/s"


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
        accounts_settings(debug=False, environ={name: value}, **BASE)


@pytest.mark.django_db
def test_the_settings_in_force_use_tokens_and_the_throttle(settings):
    assert "console.accounts.tokens.TokenAuthentication" in settings.REST_FRAMEWORK["DEFAULT_AUTHENTICATION_CLASSES"]
    assert "console.accounts.throttling.TokenRateThrottle" in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]
    assert settings.AUTHENTICATION_BACKENDS == ["console.accounts.login_throttle.ThrottledModelBackend"]
