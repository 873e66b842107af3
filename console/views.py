"""Console pages: the home page (the engine at a glance). Sign-in and sign-out are Django's auth views."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import engine_link


def engine_summary() -> dict[str, object]:
    """What the home page shows of the engine: its state in a word, why it failed, and its models."""
    server = engine_link.server_or_none()
    failure = engine_link.startup_failure()
    if server is None:
        return {"state": "absent", "failure": failure, "models": []}
    if failure:
        state = "failed"
    elif server.is_ready():
        state = "ready"
    else:
        state = "loading"
    return {"state": state, "failure": failure, "models": server.repository_index()}


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in landing page."""
    return render(request, "console/home.html", {"engine": engine_summary()})
