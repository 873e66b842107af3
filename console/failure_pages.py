"""Pages and API calls when what the console stands on fails: the database is down (503), a disk is full (507).

Each gets a page or JSON that says so, never a traceback. Inference does not need the database (see
console/accounts/inference_auth.py); the console and its API do. A view that finds the database gone, or a full disk
under a request body's temporary file, is answered by `FailurePagesMiddleware`; one that fails earlier, in a
middleware (a session read, say), by `server_error`, Django's handler500. Both give the same answer.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

from console.outages import Outage, is_database_outage, is_storage_full

RETRY_AFTER_SECONDS = 5
DATABASE_MESSAGE = (
    "The database is unavailable, so the console and its API cannot answer right now. "
    "Inference on /v2 and gRPC keeps serving the models that were loaded. Retry shortly."
)
STORAGE_MESSAGE = (
    "The server's disk is full, so the request could not be stored. Nothing changed; free space and retry."
)


def failure_response(request: HttpRequest, exc: BaseException) -> HttpResponse | None:
    """The answer to a request that met `exc`, when it is a database outage or a full disk; None otherwise."""
    if is_database_outage(exc):
        response = _answer(request, 503, "Database unavailable", DATABASE_MESSAGE, "database_unavailable")
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    if is_storage_full(exc):
        return _answer(request, 507, "Disk full", STORAGE_MESSAGE, "insufficient_storage")
    return None


def _answer(request: HttpRequest, status: int, title: str, message: str, code: str) -> HttpResponse:
    """A page (HTML) or an API call's JSON (worded as DRF words its errors)."""
    if request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", ""):
        return JsonResponse({"detail": message, "code": code}, status=status)
    # rendered without the request: the base template's user menu would ask the database again
    page = render_to_string("console/failure.html", {"title": title, "message": message, "code": code})
    return HttpResponse(page, status=status)


class FailurePagesMiddleware:
    """Turns a view's lost database connection or full disk into its answer; a database outage is logged once."""

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.outage = Outage("the database (console and API)")

    def __call__(self, request: HttpRequest) -> Any:
        response = self.get_response(request)
        if self.outage.down and response.status_code < 500:
            self.outage.recovered()
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_database_outage(exception):
            self.outage.failed(exception)
        return failure_response(request, exception)


def server_error(request: HttpRequest, template_name: str = defaults.ERROR_500_TEMPLATE_NAME) -> HttpResponse:
    """handler500: the failure's own answer when it is an outage or a full disk, Django's own 500 otherwise."""
    failure = sys.exc_info()[1]
    answer = failure_response(request, failure) if failure is not None else None
    return answer if answer is not None else defaults.server_error(request, template_name)
