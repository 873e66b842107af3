"""Console pages: the home page (the whole server at a glance) and docs/benchmarks.md, which pages link to (the
analyzer's in-process figures against what HTTP callers get). Sign-in and sign-out are Django's auth views."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from console.accounts.permissions import can_view_models
from console.config import BASE_DIR
from console.overview import build_overview
from console.runtime_of import runtime_of


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """The signed-in landing page: models, figures, devices and the last audit events (console/overview.py)."""
    runtime = runtime_of(request)
    if not can_view_models(request.user):  # signed in without a console role: the engine's state, nothing more
        return render(request, "console/home.html", {"engine_state": runtime.state if runtime else "absent"})
    return render(request, "console/home.html", {"overview": build_overview(runtime)})


@login_required
def benchmarks(request: HttpRequest) -> FileResponse:
    """docs/benchmarks.md as text: what callers over HTTP and gRPC get, measured (the image ships docs/)."""
    path = BASE_DIR / "docs" / "benchmarks.md"
    if not path.is_file():
        raise Http404("docs/benchmarks.md is not installed with this server")
    return FileResponse(path.open("rb"), content_type="text/plain; charset=utf-8")
