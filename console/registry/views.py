"""Registry pages: the models list, a model's page, the audit log. The pages' script reads the REST API."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from console.accounts.permissions import can_manage_models, python_models_refusal, role_required
from console.registry import pipeline, services
from console.registry.api import filter_audit
from console.registry.engine_status import EngineStatus
from console.registry.models import AuditEvent, RegisteredModel
from console.registry.uploads import max_upload_bytes

AUDIT_PAGE_SIZE = 100


@role_required()
def model_list(request: HttpRequest) -> HttpResponse:
    """Every registered model with its state, active version and throughput, refreshed live."""
    return render(
        request,
        "registry/model_list.html",
        {
            "models": RegisteredModel.objects.select_related("active_version").prefetch_related("versions"),
            "can_manage": can_manage_models(request.user),
        },
    )


@role_required()
def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One model: versions and their actions, upload, effective config, and a form that sends a v2 request; an
    ensemble's pipeline as a graph; the ensembles that use it."""
    model = get_object_or_404(RegisteredModel.objects.select_related("active_version"), name=name)
    config = model.shown_config
    ensemble = pipeline.is_ensemble(config)
    return render(
        request,
        "registry/model_detail.html",
        {
            "model": model,
            "can_manage": can_manage_models(request.user),
            "python_refusal": python_models_refusal(request.user),
            "max_upload_bytes": max_upload_bytes(),
            "is_ensemble": ensemble,
            "pipeline": pipeline.layout(config, composing_models(config, request)) if ensemble else None,
            "used_by": services.ensembles_using(model.name),
        },
    )


def composing_models(config: Mapping[str, Any], request: HttpRequest) -> dict[str, pipeline.ComposingModel]:
    """What the registry and this process's engine know of each model an ensemble's steps call."""
    names = {step.model_name for step in pipeline.steps_of(config)}
    known = RegisteredModel.objects.select_related("active_version").filter(name__in=names)
    context = {"request": request}
    return {
        model.name: pipeline.ComposingModel(True, model.active_number, EngineStatus.of(model.name, context).serving)
        for model in known
    }


@role_required()
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit trail, newest first, filterable by model, action and actor."""
    events = filter_audit(AuditEvent.objects.all(), request.GET)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    for event in page:
        event.detail_text = json.dumps(event.detail, sort_keys=True) if event.detail else ""
    filters = {key: request.GET.get(key, "") for key in ("model", "action", "actor")}
    return render(request, "registry/audit_log.html", {"page": page, "filters": filters})
