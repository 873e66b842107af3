"""The /monitoring/ page: charts drawn by static/monitoring/monitoring.js from the /ws/metrics/ stream."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console import engine_link
from console.accounts.permissions import role_required
from console.monitoring.live import current_sampler


def engine_models() -> list[str]:
    """Names of the models the engine serves now, for the model filter before the first snapshot arrives."""
    server = engine_link.server_or_none()
    if server is None:
        return []
    return sorted({served.name for served in server.served_versions()})


@role_required()
def monitoring(request: HttpRequest) -> HttpResponse:
    """Live charts of every model and device."""
    sampler = current_sampler()
    return render(
        request,
        "monitoring/monitoring.html",
        {
            "models": engine_models(),
            "selected_model": request.GET.get("model", ""),
            "sampling": sampler is not None,
        },
    )
