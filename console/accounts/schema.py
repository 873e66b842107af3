"""OpenAPI description of API-token authentication for drf-spectacular (imported once the app is ready)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class TokenAuthenticationScheme(OpenApiAuthenticationExtension):
    """`Authorization: Bearer <key>` (or `Token <key>`) in the schema, so clients and fuzzers know to send it."""

    target_class = "console.accounts.tokens.TokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An Infera API token; `Authorization: Token <key>` is accepted too.",
        }
