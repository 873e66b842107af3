"""The /monitoring/ page: charts drawn by static/monitoring/monitoring.js from the /ws/metrics/ stream."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.accounts.permissions import role_required
from console.monitoring.pipelines import model_choices
from console.runtime_of import runtime_of


@role_required()
def monitoring(request: HttpRequest) -> HttpResponse:
    """Live charts of every model and device; `?model=` narrows them to one model (an ensemble: with its steps),
    `?split=versions` draws each model version apart, `?replica=` shows one replica of a cluster."""
    runtime = runtime_of(request)
    # the model filter's choices before the first snapshot arrives
    pipelines, models = model_choices(runtime.server if runtime else None)
    return render(
        request,
        "monitoring/monitoring.html",
        {
            "pipelines": pipelines,
            "models": models,
            "selected_model": request.GET.get("model", ""),
            "split_versions": request.GET.get("split") == "versions",
            "sampling": runtime is not None,
            "cluster": runtime is not None and runtime.cluster.enabled,
            "process": runtime.identity.name if runtime is not None else "",
            "selected_replica": request.GET.get("replica", ""),
        },
    )
