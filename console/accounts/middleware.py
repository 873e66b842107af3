"""Response headers Django's SecurityMiddleware does not set: Content-Security-Policy and Permissions-Policy."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from console.accounts.security_settings import CONTENT_SECURITY_POLICY, PERMISSIONS_POLICY


class SecurityHeadersMiddleware:
    """Adds the policy headers to every console response that has not set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.csp = CONTENT_SECURITY_POLICY

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if self.csp:
            response.headers.setdefault("Content-Security-Policy", self.csp)
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response
