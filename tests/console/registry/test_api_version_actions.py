"""GET|DELETE /api/models/{name}/versions/{n}/ and POST .../activate, .../load, .../unload."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, upload

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def two_versions(as_operator, simple_onnx):
    """simple with versions 1 (active) and 2, both READY as if the reconciler had loaded them."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    for _ in range(2):
        assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    ModelVersion.objects.update(state=VersionState.READY)


def version(number: int) -> ModelVersion:
    return ModelVersion.objects.get(model__name="simple", number=number)


def test_it_lists_versions(as_viewer):
    answer = as_viewer.get("/api/models/simple/versions/")
    assert answer.status_code == 200
    assert [(v["number"], v["is_active"]) for v in answer.json()] == [(1, True), (2, False)]


def test_it_shows_one_version_with_its_effective_config(as_viewer):
    answer = as_viewer.get("/api/models/simple/versions/2/")
    assert answer.status_code == 200
    assert answer.json()["config"]["name"] == "simple"
    assert answer.json()["uploaded_by"] == "otto"


def test_it_answers_unknown_and_malformed_versions_clearly(as_viewer):
    unknown = as_viewer.get("/api/models/simple/versions/7/")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "model 'simple' has no version 7 (versions: 1, 2)"
    malformed = as_viewer.get("/api/models/simple/versions/two/")
    assert malformed.status_code == 400
    assert malformed.json()["detail"] == "a version is a whole number, got 'two'"
    assert as_viewer.get("/api/models/simple/versions/%C2%B3/").status_code == 400  # '³' is a digit to Python


@pytest.mark.parametrize("slash", ["", "/"])
def test_it_activates_a_ready_version_and_rolls_back(as_operator, store, slash):
    forward = as_operator.post(f"/api/models/simple/versions/2/activate{slash}")
    assert forward.status_code == 202, forward.content
    assert forward.json()["is_active"] is True
    assert RegisteredModel.objects.get().active_number == 2
    back = as_operator.post("/api/models/simple/versions/1/activate")
    assert back.status_code == 202
    assert RegisteredModel.objects.get().active_number == 1
    events = list(AuditEvent.objects.filter(action="version.activate").order_by("id").values_list("object", "detail"))
    assert events[-2:] == [("simple/2", {"previous": 1}), ("simple/1", {"previous": 2})]


def test_it_writes_the_active_versions_config_into_the_store(as_operator, simple_onnx, store):
    config = SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: 2")
    assert upload(as_operator, "simple", model_file(simple_onnx), config=config).status_code == 201
    ModelVersion.objects.filter(number=3).update(state=VersionState.READY)
    as_operator.post("/api/models/simple/versions/3/activate")
    assert "max_batch_size: 2" in (store / "simple" / "config.pbtxt").read_text()
    as_operator.post("/api/models/simple/versions/1/activate")
    # version 1 came without a config: auto-completion gave it Triton's default batch size
    assert "max_batch_size: 4" in (store / "simple" / "config.pbtxt").read_text()


@pytest.mark.parametrize("state", [VersionState.FAILED, VersionState.UNLOADED, VersionState.LOADING])
def test_it_activates_only_ready_versions(as_operator, state):
    ModelVersion.objects.filter(number=2).update(state=state)
    answer = as_operator.post("/api/models/simple/versions/2/activate")
    assert answer.status_code == 409
    assert answer.json()["detail"].startswith(
        f"version 2 of 'simple' is {state}; only a READY version can be activated"
    )
    assert RegisteredModel.objects.get().active_number == 1


def test_it_unloads_an_inactive_version(as_operator):
    answer = as_operator.post("/api/models/simple/versions/2/unload")
    assert answer.status_code == 202
    assert version(2).should_load is False
    assert AuditEvent.objects.filter(action="version.unload", object="simple/2").exists()


def test_it_refuses_to_unload_the_active_version(as_operator):
    answer = as_operator.post("/api/models/simple/versions/1/unload")
    assert answer.status_code == 409
    assert answer.json()["detail"] == (
        "version 1 is the active version of 'simple'; activate another version before unloading it"
    )
    assert version(1).should_load is True


def test_it_loads_an_unloaded_version_and_retries_a_failed_one(as_operator):
    ModelVersion.objects.filter(number=2).update(should_load=False, state=VersionState.FAILED, error="boom")
    answer = as_operator.post("/api/models/simple/versions/2/load")
    assert answer.status_code == 202
    assert (answer.json()["state"], answer.json()["error"], answer.json()["should_load"]) == ("PENDING", "", True)
    assert AuditEvent.objects.filter(action="version.load", object="simple/2").exists()


def test_it_deletes_an_inactive_version_and_its_folder(as_operator, store, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        answer = as_operator.delete("/api/models/simple/versions/2/")
    assert answer.status_code == 204
    assert list(ModelVersion.objects.values_list("number", flat=True)) == [1]
    assert not (store / "simple" / "2").exists()
    assert (store / "simple" / "1" / "model.onnx").is_file()
    assert AuditEvent.objects.filter(action="version.delete", object="simple/2").exists()


def test_it_refuses_to_delete_the_active_version(as_operator, store):
    answer = as_operator.delete("/api/models/simple/versions/1/")
    assert answer.status_code == 409
    assert "activate another version before deleting it" in answer.json()["detail"]
    assert (store / "simple" / "1").is_dir()


def test_it_never_reuses_a_deleted_versions_number(as_operator, simple_onnx, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        as_operator.delete("/api/models/simple/versions/2/")
    assert upload(as_operator, "simple", model_file(simple_onnx)).json()["number"] == 2
    # the number came back because nothing of version 2 remained; a FAILED row keeps its number taken
    upload(as_operator, "simple", model_file(b"junk", "model.onnx"))
    assert upload(as_operator, "simple", model_file(simple_onnx)).json()["number"] == 4


@pytest.mark.parametrize("action", ["activate", "load", "unload"])
def test_viewers_cannot_change_versions(as_viewer, action):
    assert as_viewer.post(f"/api/models/simple/versions/2/{action}").status_code == 403
    assert as_viewer.delete("/api/models/simple/versions/2/").status_code == 403


def test_it_uploads_and_activates_in_one_request(as_operator, simple_onnx):
    answer = upload(as_operator, "simple", model_file(simple_onnx), activate="true")
    assert answer.status_code == 201
    assert answer.json()["is_active"] is True
    assert RegisteredModel.objects.get().active_number == 3
