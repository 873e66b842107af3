"""Web-safety and accounts settings for console/settings.py to apply; plain values, no Django models imported.

Use from settings.py:
    from console.accounts.security_settings import accounts_settings
    globals().update(accounts_settings(debug=DEBUG, rest_framework=REST_FRAMEWORK, logging_config=LOGGING))
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

# scripts may be inline in templates and charting libraries evaluate code; the rest is locked to this origin
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self' 'unsafe-inline' 'unsafe-eval'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self' ws: wss:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

MIDDLEWARE_ENTRY = "console.accounts.middleware.SecurityHeadersMiddleware"
AUTHENTICATION_BACKENDS = ["console.accounts.login_throttle.ThrottledModelBackend"]
TOKEN_AUTHENTICATION = "console.accounts.tokens.TokenAuthentication"
API_THROTTLE = "console.accounts.throttling.TokenRateThrottle"
MASKING_FILTER = {"()": "console.accounts.log_masking.SecretMaskingFilter"}
INFERENCE_AUTH_CHOICES = ("token", "none", "auto")
DEFAULT_API_RATE = "600/min"


def cookie_and_header_settings(debug: bool, secure_cookies: bool | None = None) -> dict[str, Any]:
    """Cookie flags and security headers; cookies are Secure unless debugging (or INFERA_SECURE_COOKIES=false)."""
    secure = (not debug) if secure_cookies is None else secure_cookies
    return {
        "SESSION_COOKIE_SECURE": secure,
        "CSRF_COOKIE_SECURE": secure,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "CSRF_COOKIE_SAMESITE": "Lax",
        "SESSION_COOKIE_AGE": 60 * 60 * 12,
        "X_FRAME_OPTIONS": "DENY",
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "SECURE_REFERRER_POLICY": "same-origin",
        "SECURE_CROSS_ORIGIN_OPENER_POLICY": "same-origin",
    }


def rest_framework_settings(rest_framework: Mapping[str, Any]) -> dict[str, Any]:
    """REST_FRAMEWORK with API tokens accepted next to sessions and the per-token throttle on every view."""
    merged = dict(rest_framework)
    authentication = list(merged.get("DEFAULT_AUTHENTICATION_CLASSES", []))
    if TOKEN_AUTHENTICATION not in authentication:
        authentication.insert(0, TOKEN_AUTHENTICATION)
    merged["DEFAULT_AUTHENTICATION_CLASSES"] = authentication
    throttles = list(merged.get("DEFAULT_THROTTLE_CLASSES", []))
    if API_THROTTLE not in throttles:
        throttles.append(API_THROTTLE)
    merged["DEFAULT_THROTTLE_CLASSES"] = throttles
    return merged


def logging_settings(logging_config: Mapping[str, Any]) -> dict[str, Any]:
    """LOGGING with the secret-masking filter on every handler."""
    config = copy.deepcopy(dict(logging_config))
    config.setdefault("filters", {})["mask_secrets"] = MASKING_FILTER
    for handler in config.get("handlers", {}).values():
        filters = handler.setdefault("filters", [])
        if "mask_secrets" not in filters:
            filters.append("mask_secrets")
    return config


def accounts_settings(
    *,
    debug: bool,
    rest_framework: Mapping[str, Any],
    logging_config: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Every setting the accounts app needs, read from INFERA_* variables through console.env's strict readers."""
    from console.env import env_bool, env_choice, env_int, env_str

    secure_cookies = env_str("INFERA_SECURE_COOKIES", environ=environ)
    values: dict[str, Any] = cookie_and_header_settings(
        debug, None if secure_cookies is None else env_bool("INFERA_SECURE_COOKIES", not debug, environ=environ)
    )
    values.update(
        AUTHENTICATION_BACKENDS=list(AUTHENTICATION_BACKENDS),
        REST_FRAMEWORK=rest_framework_settings(rest_framework),
        LOGGING=logging_settings(logging_config),
        INFERA_ALLOW_PYTHON_MODELS=env_bool("INFERA_ALLOW_PYTHON_MODELS", True, environ=environ),
        INFERA_INFERENCE_AUTH=env_choice("INFERA_INFERENCE_AUTH", "auto", INFERENCE_AUTH_CHOICES, environ=environ),
        INFERA_LOGIN_MAX_FAILURES=env_int("INFERA_LOGIN_MAX_FAILURES", 5, minimum=1, environ=environ),
        INFERA_LOGIN_WINDOW_SECONDS=env_int("INFERA_LOGIN_WINDOW_SECONDS", 300, minimum=1, environ=environ),
        INFERA_API_RATE=api_rate(env_str("INFERA_API_RATE", environ=environ)),
    )
    return values


def api_rate(raw: str | None) -> str:
    """INFERA_API_RATE checked: requests per second, minute, hour or day, like `600/min`."""
    from console.env import EnvError

    if raw is None or not raw.strip():
        return DEFAULT_API_RATE
    rate = raw.strip().lower()
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", rate):
        raise EnvError(
            f"INFERA_API_RATE must be a number of requests per s, min, hour or day like 600/min, got {raw!r}"
        )
    return rate
