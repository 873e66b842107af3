"""Registry pages: the models list, a model's page, the audit log. The pages' script reads the REST API; the lists
sort and filter by their query string (console/listing.py, console/registry/forms.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from console.accounts.permissions import can_manage_models, python_models_refusal, role_required
from console.listing import SortOrder
from console.registry import pipeline
from console.registry.audit import audit_events
from console.registry.engine_status import EngineStatus
from console.registry.forms import MODEL_COLUMNS, MODEL_ORDER, ModelFilterForm
from console.registry.models import RegisteredModel, VersionState
from console.registry.playground import chat_tokens, chats, generates_text, is_language_model
from console.registry.services import lookups
from console.registry.try_it import SAMPLE_DIGIT_LABEL, SAMPLE_IMAGE, try_it_plan
from console.registry.uploads import max_upload_bytes

AUDIT_PAGE_SIZE = 100


@role_required()
def model_list(request: HttpRequest) -> HttpResponse:
    """Every registered model with its state, active version and throughput, refreshed live; sortable, filterable."""
    form = ModelFilterForm(request.GET)
    order = SortOrder(request.GET, MODEL_COLUMNS, "name")
    models = form.apply(RegisteredModel.objects.select_related("active_version")).order_by(*order.order_by(MODEL_ORDER))
    return render(
        request,
        "registry/model_list.html",
        {"models": models, "form": form, "order": order, "can_manage": can_manage_models(request.user)},
    )


@role_required()
def model_detail(request: HttpRequest, name: str) -> HttpResponse:
    """One model in tabs: versions and their actions, upload, and a form that sends a v2 request built from its
    config (console/registry/try_it.py); traffic; the config; the analyzer; live numbers with an ensemble's pipeline
    as a graph; the ensembles that use it; a language model's scheduler numbers, live; a text
    generator's playground (a chat for one that takes messages)."""
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
            "used_by": lookups.ensembles_using(model.name),
            "generates_text": generates_text(config),
            "chats": chats(config),
            "chat_tokens": chat_tokens(config, settings.INFERA.engine.openai.max_tokens),
            "language_model": is_language_model(config),
            "version_states": [state.value for state in VersionState],
            "try_plan": try_it_plan(config),
            "try_sample_image": SAMPLE_IMAGE,
            "try_sample_label": SAMPLE_DIGIT_LABEL,
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
    """The audit trail, newest first unless sorted otherwise, filterable by model, action, actor and days; the same
    view as CSV from the API."""
    form, order, events = audit_events(request.GET)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "registry/audit_log.html", {"page": page, "form": form, "order": order})
