"""Console pages: the home page (the whole server at a glance). Sign-in and sign-out are Django's auth views."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.accounts.permissions import can_view_models
from console.overview import build_overview
from console.runtime_of import runtime_of


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in landing page: models, figures, devices and the last audit events (console/overview.py)."""
    runtime = runtime_of(request)
    if not can_view_models(request.user):  # signed in without a console role: the engine's state, nothing more
        return render(request, "console/home.html", {"engine_state": runtime.state if runtime else "absent"})
    return render(request, "console/home.html", {"overview": build_overview(runtime)})
