"""GET|POST /api/models/ and GET|PATCH|DELETE /api/models/{name}/."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from console.accounts.tokens import issue_token
from console.audit.models import AuditEvent
from console.registry.models import RegisteredModel
from tests.console.registry.conftest import model_file, upload

pytestmark = pytest.mark.django_db


def test_it_registers_a_model_and_lists_it(as_operator, as_viewer):
    created = as_operator.post("/api/models/", {"name": "digits", "description": "8x8 digits"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["name"] == "digits"
    assert created.json()["created_by"] == "otto"
    assert created.json()["versions"] == []

    listed = as_viewer.get("/api/models/")
    assert listed.status_code == 200
    assert [m["name"] for m in listed.json()] == ["digits"]
    assert listed.json()[0]["active_version"] is None
    assert AuditEvent.objects.filter(action="model.register", object="digits", actor_name="otto").exists()


@pytest.mark.parametrize("name", ["../etc", "a/b", ".hidden", "", "x" * 129, "white space", "-dash-first"])
def test_it_refuses_a_bad_model_name(as_operator, name):
    answer = as_operator.post("/api/models/", {"name": name}, format="json")
    assert answer.status_code == 400
    assert "name" in answer.json()
    assert not RegisteredModel.objects.exists()


def test_it_refuses_a_second_model_of_the_same_name(as_operator):
    as_operator.post("/api/models/", {"name": "digits"}, format="json")
    answer = as_operator.post("/api/models/", {"name": "digits"}, format="json")
    assert answer.status_code == 409
    assert answer.json()["detail"] == "a model named 'digits' is already registered"


def test_it_shows_one_model_with_its_versions(as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    answer = as_operator.get("/api/models/simple/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["active_version"] == 1
    assert body["platform"] == "onnxruntime_onnx"
    assert [v["number"] for v in body["versions"]] == [1]
    assert body["versions"][0]["is_active"] is True


def test_it_answers_404_for_an_unknown_model(as_viewer):
    answer = as_viewer.get("/api/models/nope/")
    assert answer.status_code == 404
    assert answer.json()["detail"] == "no registered model named 'nope'"


def test_it_changes_the_description_but_never_the_name(as_operator):
    as_operator.post("/api/models/", {"name": "digits"}, format="json")
    answer = as_operator.patch("/api/models/digits/", {"description": "better"}, format="json")
    assert answer.status_code == 200
    assert answer.json()["description"] == "better"
    renamed = as_operator.patch("/api/models/digits/", {"name": "other", "description": "x"}, format="json")
    assert renamed.status_code == 400
    assert renamed.json() == {"name": ["a model's name cannot change (it names its folder and its /v2 URL)"]}
    assert as_operator.patch("/api/models/digits/", '"name"', content_type="application/json").status_code == 400
    event = AuditEvent.objects.get(action="model.update")
    assert event.detail == {"description": {"from": "", "to": "better"}}


def test_it_deletes_a_model_with_its_folder(as_operator, simple_onnx, store, django_capture_on_commit_callbacks):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    upload(as_operator, "simple", model_file(simple_onnx))
    assert (store / "simple" / "1" / "model.onnx").is_file()
    with django_capture_on_commit_callbacks(execute=True):
        answer = as_operator.delete("/api/models/simple/")
    assert answer.status_code == 204
    assert not RegisteredModel.objects.exists()
    assert not (store / "simple").exists()
    assert AuditEvent.objects.filter(action="model.delete", object="simple").get().detail == {"versions": [1]}


def test_it_lets_viewers_read_but_not_change(as_viewer):
    assert as_viewer.get("/api/models/").status_code == 200
    answer = as_viewer.post("/api/models/", {"name": "digits"}, format="json")
    assert answer.status_code == 403
    assert answer.json()["detail"] == "changing models needs the operator or admin role"


def test_it_refuses_anonymous_requests():
    assert APIClient().get("/api/models/").status_code in (401, 403)


def test_it_accepts_an_api_token(operator):
    issued = issue_token(operator, "ci")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {issued.key}")
    answer = client.post("/api/models/", {"name": "from-ci"}, format="json")
    assert answer.status_code == 201
    assert answer.json()["created_by"] == "otto"
