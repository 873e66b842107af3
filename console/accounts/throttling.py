"""Request throttling of the management API, keyed by API token (or user, or address): over the rate is a 429."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from console.accounts.models import ApiToken


class TokenRateThrottle(SimpleRateThrottle):
    """Each API token (else each signed-in user, else each address) gets INFERA_API_RATE requests."""

    scope = "management"

    def get_rate(self) -> str:
        return settings.INFERA.api_rate

    def get_cache_key(self, request: Any, view: Any) -> str:
        if isinstance(request.auth, ApiToken):
            ident = f"token-{request.auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"address-{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
