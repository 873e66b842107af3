"""Web-safety values and the settings blocks of the accounts app that console/settings.py assigns by name."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# scripts only from files of this origin (no inline script, no eval); charts and Swagger UI set inline styles
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
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
# bandit B105 below: a class path, not a secret
TOKEN_AUTHENTICATION = "console.accounts.tokens.TokenAuthentication"  # nosec B105
API_THROTTLE = "console.accounts.throttling.TokenRateThrottle"
MASKING_FILTER = {"()": "console.accounts.log_masking.SecretMaskingFilter"}
QUIET_CLIENT_ERRORS = {"()": "console.accounts.log_masking.QuietClientErrors"}
SESSION_COOKIE_AGE = 60 * 60 * 12


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
    """LOGGING with secrets masked, and refused requests logged without a traceback, on every handler."""
    config = copy.deepcopy(dict(logging_config))
    config.setdefault("filters", {})["mask_secrets"] = MASKING_FILTER
    config["filters"]["quiet_client_errors"] = QUIET_CLIENT_ERRORS
    for handler in config.get("handlers", {}).values():
        filters = handler.setdefault("filters", [])
        for name in ("mask_secrets", "quiet_client_errors"):
            if name not in filters:
                filters.append(name)
    return config
