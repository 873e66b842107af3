"""GET|POST /api/models/{name}/config and POST .../config/validate: the config editor's read, check and save."""

from __future__ import annotations

import json

import pytest

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from engine.config.text_format import parse_config_pbtxt
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, upload

pytestmark = pytest.mark.django_db

URL = "/api/models/simple/config"
SMALLER = SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: 4")


@pytest.fixture(autouse=True)
def simple(as_operator, simple_onnx):
    """simple with one version (active, READY as if the reconciler had loaded it), its config SIMPLE_PBTXT."""
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    answer = upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT)
    assert answer.status_code == 201, answer.content
    ModelVersion.objects.filter(number=1).update(state=VersionState.READY)


def validate(client, text: str, form: str = "pbtxt"):
    answer = client.post(f"{URL}/validate", {"format": form, "text": text}, format="json")
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_it_reads_the_active_versions_config_in_both_forms(as_viewer):
    answer = as_viewer.get(URL)
    assert answer.status_code == 200
    body = answer.json()
    assert (body["model"], body["version"]) == ("simple", 1)
    assert body["config"]["max_batch_size"] == 8
    assert parse_config_pbtxt(body["pbtxt"]).max_batch_size == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: -1"), "max_batch_size must be 0 or more, got -1"),
        (SIMPLE_PBTXT + "max_queue_delay: 5\n", "unknown field 'max_queue_delay' in ModelConfig"),
        (SIMPLE_PBTXT.replace("dims: [16]", "dims: [15]", 1), "input 'INPUT0'"),
        (
            SIMPLE_PBTXT.replace("dynamic_batching { }", "dynamic_batching { preferred_batch_size: [ 32 ] }"),
            "preferred_batch_size",
        ),
    ],
)
def test_it_answers_an_invalid_edit_with_the_engines_message_naming_the_field(as_viewer, text, message):
    body = validate(as_viewer, text)
    assert body["valid"] is False
    assert message in body["errors"][0]
    assert body["config"] is None and body["changes"] == []


def test_it_names_the_line_of_a_parse_error(as_operator):
    body = validate(as_operator, 'name: "simple"\nmax_batch_size: "eight"\n')
    assert body["valid"] is False
    assert "config.pbtxt: line 2: field 'max_batch_size'" in body["errors"][0]


def test_it_shows_a_valid_edits_changes_and_diff(as_viewer):
    body = validate(as_viewer, SMALLER)
    assert body["valid"] is True and body["errors"] == []
    assert body["config"]["max_batch_size"] == 4
    assert {"field": "max_batch_size", "before": 8, "after": 4} in body["changes"]
    assert "-max_batch_size: 8" in body["diff"] and "+max_batch_size: 4" in body["diff"]


def test_it_checks_the_json_form_too(as_operator):
    config = as_operator.get(URL).json()["config"]
    config["dynamic_batching"]["max_queue_delay_microseconds"] = 250
    body = validate(as_operator, json.dumps(config), "json")
    assert body["changes"] == [{"field": "dynamic_batching.max_queue_delay_microseconds", "before": 0, "after": 250}]
    assert "max_queue_delay_microseconds: 250" in body["pbtxt"]
    config["instance_group"] = [{"count": -1, "kind": "KIND_CPU"}]
    refused = validate(as_operator, json.dumps(config), "json")
    assert "instance_group 0: count must be 1 or more, got -1" in refused["errors"][0]


def test_it_counts_a_part_added_or_removed_whole_as_one_change(as_operator):
    config = as_operator.get(URL).json()["config"]
    config["instance_group"] = [{"count": 2, "kind": "KIND_CPU"}]
    del config["dynamic_batching"]
    body = validate(as_operator, json.dumps(config), "json")
    assert [change["field"] for change in body["changes"]] == ["dynamic_batching", "instance_group[0]"]
    removed, added = body["changes"]
    assert added["before"] is None and added["after"]["count"] == 2
    assert removed["before"]["max_queue_delay_microseconds"] == 0 and removed["after"] is None


def test_it_saves_a_valid_edit_as_a_new_active_version_audited(as_operator, store):
    answer = as_operator.post(URL, {"format": "pbtxt", "text": SMALLER, "action": "new_version"}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["number"] == 2 and body["config"]["max_batch_size"] == 4
    assert body["notes"] == "config edited in the console"
    assert RegisteredModel.objects.get(name="simple").active_number == 2
    assert (store / "simple" / "2" / "model.onnx").read_bytes() == (store / "simple" / "1" / "model.onnx").read_bytes()
    edit = AuditEvent.objects.get(action="config.edit")
    assert (edit.actor_name, edit.object, edit.detail["source"]) == ("otto", "simple/2", 1)
    assert {"field": "max_batch_size", "before": 8, "after": 4} in edit.detail["changes"]
    assert AuditEvent.objects.filter(action="version.upload", object="simple/2").exists()


def test_it_leaves_a_field_removed_in_the_editor_out_of_the_new_version(as_operator):
    without_batching = SIMPLE_PBTXT.replace("dynamic_batching { }", "")
    answer = as_operator.post(
        URL, {"format": "pbtxt", "text": without_batching, "action": "new_version"}, format="json"
    )
    assert answer.status_code == 201, answer.content
    assert "dynamic_batching" not in answer.json()["config"]


def test_it_saves_no_invalid_edit(as_operator):
    broken = SIMPLE_PBTXT.replace("max_batch_size: 8", "max_batch_size: -1")
    for action in ("new_version", "apply"):
        answer = as_operator.post(URL, {"format": "pbtxt", "text": broken, "action": action}, format="json")
        assert answer.status_code == 400
        assert "max_batch_size must be 0 or more" in answer.json()["detail"]
    assert ModelVersion.objects.count() == 1
    assert not AuditEvent.objects.filter(action__in=["config.edit", "version.config"]).exists()


def test_it_saves_no_unchanged_config(as_operator):
    current = as_operator.get(URL).json()["pbtxt"]
    answer = as_operator.post(URL, {"format": "pbtxt", "text": current, "action": "new_version"}, format="json")
    assert answer.status_code == 400 and "nothing to save" in answer.json()["detail"]


def test_it_applies_an_edit_to_the_active_version_which_reloads(as_operator, store):
    answer = as_operator.post(URL, {"format": "pbtxt", "text": SMALLER, "action": "apply"}, format="json")
    assert answer.status_code == 202, answer.content
    version = ModelVersion.objects.get(number=1)
    assert version.config["max_batch_size"] == 4 and version.state == VersionState.PENDING
    assert ModelVersion.objects.count() == 1
    assert "max_batch_size: 4" in (store / "simple" / "config.pbtxt").read_text()
    event = AuditEvent.objects.get(action="version.config")
    assert event.object == "simple/1" and event.detail["changes"][0]["field"] == "max_batch_size"


def test_it_lets_viewers_read_and_check_but_not_save(as_viewer):
    assert as_viewer.get(URL).status_code == 200
    assert validate(as_viewer, SMALLER)["valid"] is True
    answer = as_viewer.post(URL, {"format": "pbtxt", "text": SMALLER, "action": "new_version"}, format="json")
    assert answer.status_code == 403
    assert ModelVersion.objects.count() == 1


def test_it_has_no_config_to_edit_without_an_active_version(as_operator):
    as_operator.post("/api/models/", {"name": "empty"}, format="json")
    assert as_operator.get("/api/models/empty/config").status_code == 409
    assert as_operator.get("/api/models/nothing/config").status_code == 404


def test_it_refuses_a_malformed_request(as_operator):
    answer = as_operator.post(URL, {"format": "yaml", "text": SMALLER, "action": "new_version"}, format="json")
    assert answer.status_code == 400 and "format" in answer.json()


def test_it_documents_the_config_endpoints_in_the_openapi_schema(as_viewer):
    schema = as_viewer.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert {"get", "post"} <= set(schema["paths"]["/api/models/{name}/config"])
    assert "post" in schema["paths"]["/api/models/{name}/config/validate"]
    assert {"ConfigCheck", "ConfigSave", "EditedConfig"} <= set(schema["components"]["schemas"])
