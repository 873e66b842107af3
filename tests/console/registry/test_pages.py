"""The registry pages render for every console role, keep others out, and load nothing from a CDN."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from console.audit.models import AuditEvent
from tests.console.accounts.conftest import signed_in
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db


def external_urls(html: str) -> list[str]:
    return re.findall(r"(?:src|href)=\"(https?://[^\"]+)\"", html)


def test_the_models_list_shows_each_model_with_a_live_throughput_hook(viewer, as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    upload(as_operator, "simple", model_file(simple_onnx))
    answer = signed_in(viewer).get("/models/")
    assert answer.status_code == 200
    html = answer.content.decode()
    assert 'data-model="simple"' in html
    assert 'data-live-model="simple"' in html
    assert "registry/registry.js" in html
    assert "Register a model" not in html  # viewers read only
    assert external_urls(html) == []


def test_the_model_page_offers_upload_and_try_it_to_operators(operator, as_operator):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    html = signed_in(operator).get("/models/simple/").content.decode()
    assert 'id="upload-form"' in html
    assert 'id="try-form"' in html
    assert 'name="csrf-token"' in html
    assert "only admins may upload python-backend models" in html
    assert external_urls(html) == []


def test_the_model_page_has_a_traffic_panel_whose_controls_only_managers_get(viewer, operator, as_operator):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    managed = signed_in(operator).get("/models/simple/").content.decode()
    assert 'data-api="/api/models/simple/traffic"' in managed
    for control in ("traffic-mode", "traffic-slider", "traffic-promote", "traffic-rollback", "traffic-candidate"):
        assert f'id="{control}"' in managed
    assert "registry/traffic.js" in managed and "vendor/plotly.min.js" in managed
    read_only = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="traffic-rows"' in read_only and 'id="traffic-form"' not in read_only


def test_the_model_page_answers_404_for_an_unknown_model(viewer):
    assert signed_in(viewer).get("/models/nope/").status_code == 404


def test_the_audit_log_lists_events_with_filters(viewer):
    AuditEvent.record(None, "version.activate", "simple/2", previous=1)
    AuditEvent.record(None, "model.register", "other")
    html = signed_in(viewer).get("/audit/", {"model": "simple"}).content.decode()
    rows = html.split("<tbody>", 1)[1]  # the filter's choices above name every action
    assert "version.activate" in rows
    assert "model.register" not in rows
    assert "{&quot;previous&quot;: 1}" in rows


def test_pages_send_anonymous_people_to_sign_in():
    answer = Client().get("/models/")
    assert answer.status_code == 302
    assert answer["Location"].startswith("/accounts/login/")


def test_swagger_ui_and_its_assets_are_served_locally(viewer):
    client = signed_in(viewer)
    html = client.get("/api/docs/").content.decode()
    assert external_urls(html) == []
    bundle = re.search(r"\"(/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle\.js)\"", html)
    assert bundle, html[:2000]
    assert client.get(bundle.group(1)).status_code == 200


def test_the_schema_documents_every_registry_endpoint(viewer):
    schema = signed_in(viewer).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = set(schema["paths"])
    assert {
        "/api/models/",
        "/api/models/{name}/",
        "/api/models/{name}/versions/",
        "/api/models/{name}/versions/{number}/",
        "/api/models/{name}/versions/{number}/activate",
        "/api/models/{name}/versions/{number}/load",
        "/api/models/{name}/versions/{number}/unload",
        "/api/audit/",
    } <= paths
    assert not any(p.endswith(("activate/", "load/")) for p in paths)
    upload_body = schema["paths"]["/api/models/{name}/versions/"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload_body
