"""Console pages: the home page (the engine at a glance). Sign-in and sign-out are Django's auth views."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.runtime import runtime_of


def engine_summary(request: HttpRequest) -> dict[str, object]:
    """What the home page shows of the engine: its state in a word, why it failed, and its models."""
    runtime = runtime_of(request)
    if runtime is None:
        return {"state": "absent", "failure": None, "models": []}
    return {"state": runtime.state, "failure": runtime.startup_failure, "models": runtime.server.repository_index()}


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in landing page."""
    return render(request, "console/home.html", {"engine": engine_summary(request)})
