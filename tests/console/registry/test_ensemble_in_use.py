"""A model a registered ensemble calls is not deleted without saying so: 409 naming the ensembles, on the page too."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel
from console.registry.services import lookups, version_actions
from tests.console.accounts.conftest import signed_in
from tests.console.registry.conftest import ensemble_pbtxt, model_file, upload, upload_config

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def simple(as_operator, simple_onnx):
    """`simple` (two versions, 2 active) and the ensemble `pair` calling its served version."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    assert upload(as_operator, "simple", model_file(simple_onnx), activate="true").status_code == 201
    add_ensemble(as_operator, "pair")


def add_ensemble(client, name: str, version: int = -1) -> None:
    client.post("/api/models/", {"name": name}, format="json")
    assert upload_config(client, name, ensemble_pbtxt(name, version=version)).status_code == 201


def test_it_refuses_to_delete_a_model_an_ensemble_calls(as_operator, store, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = as_operator.delete("/api/models/simple/")
    assert answer.status_code == 409
    assert answer.json() == {
        "detail": "model 'simple' is used by the ensemble 'pair': change or delete it first",
        "ensembles": ["pair"],
    }
    assert RegisteredModel.objects.filter(name="simple").exists()
    assert (store / "simple" / "1" / "model.onnx").is_file()
    assert not AuditEvent.objects.filter(action="model.delete").exists()


def test_it_names_every_ensemble_that_calls_the_model(as_operator):
    add_ensemble(as_operator, "another")
    answer = as_operator.delete("/api/models/simple/")
    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        "model 'simple' is used by the ensembles 'another', 'pair': change or delete them first"
    )
    assert answer.json()["ensembles"] == ["another", "pair"]


def test_it_deletes_the_model_once_no_ensemble_calls_it(as_operator):
    assert as_operator.delete("/api/models/pair/").status_code == 204  # an ensemble itself goes as any model
    assert as_operator.delete("/api/models/simple/").status_code == 204
    assert not RegisteredModel.objects.exists()


def test_it_reads_only_the_active_config_of_each_ensemble(as_operator):
    # a new active version of `pair` that calls another model frees `simple`, though an old version still calls it
    pair = RegisteredModel.objects.get(name="pair")
    newer = ModelVersion.objects.create(
        model=pair, number=2, state="READY", config={**pair.active_version.config, "ensemble_scheduling": {"step": []}}
    )
    version_actions.activate("system", newer)
    assert lookups.ensembles_using("simple") == []
    assert as_operator.delete("/api/models/simple/").status_code == 204


def test_it_refuses_to_delete_a_version_an_ensemble_pins(as_operator):
    add_ensemble(as_operator, "pinned", version=1)
    answer = as_operator.delete("/api/models/simple/versions/1/")
    assert answer.status_code == 409
    assert answer.json() == {
        "detail": "version 1 of 'simple' is used by the ensemble 'pinned': change or delete it first",
        "ensembles": ["pinned"],
    }
    assert ModelVersion.objects.filter(model__name="simple", number=1).exists()


def test_it_deletes_a_version_no_ensemble_pins(as_operator):
    # `pair` calls the served version (-1): an inactive version may go
    assert as_operator.delete("/api/models/simple/versions/1/").status_code == 204


def test_the_page_says_which_ensembles_use_the_model_and_offers_deletion(operator, viewer):
    html = signed_in(operator).get("/models/simple/").content.decode()
    assert 'id="used-by"' in html
    assert '<a href="/models/pair/">pair</a>' in html
    assert 'id="delete-model"' in html
    assert "while an ensemble" in html
    viewer_html = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="delete-model"' not in viewer_html  # viewers read only
    assert 'id="used-by"' in viewer_html


def test_the_django_admin_leaves_deleting_models_to_the_console(admin):
    simple = RegisteredModel.objects.get(name="simple")
    answer = signed_in(admin).post(f"/admin/registry/registeredmodel/{simple.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 403
    assert RegisteredModel.objects.filter(name="simple").exists()
