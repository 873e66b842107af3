"""An ensemble that would call itself, directly or through others, is refused at every entry before anything of it
is stored (issue 32, high 1): upload, archive of several folders, config edit, /v2 load with a config, import."""

from __future__ import annotations

import pytest

from console.registry.importer import import_repository
from console.registry.models import ModelVersion, RegisteredModel
from console.registry.services import lookups
from console.registry.v2_hooks import _new_version
from engine.errors import InvalidArgument
from tests.console.registry import conftest as registry_cast
from tests.console.registry.conftest import ensemble_pbtxt, model_file, upload, upload_config, zip_of
from tests.engine.ensembles.test_ensembles import step, write_ensemble

pytestmark = pytest.mark.django_db

# the registry tests' store per test, clients and model files
store, as_operator = registry_cast.store, registry_cast.as_operator
models_dir, simple_onnx = registry_cast.models_dir, registry_cast.simple_onnx


def add_ensemble(client, name: str, calls: str):
    client.post("/api/models/", {"name": name}, format="json")
    return upload_config(client, name, ensemble_pbtxt(name, model=calls))


def versions_of(name: str) -> list[int]:
    return list(ModelVersion.objects.filter(model__name=name).values_list("number", flat=True))


def test_it_refuses_an_ensemble_naming_itself_before_storing_it(as_operator, store):
    answer = add_ensemble(as_operator, "loop", calls="loop")
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith("ensemble 'loop' -> 'loop' is a cycle")
    assert versions_of("loop") == []
    assert not (store / "loop" / "1").exists()


def test_it_refuses_the_second_of_two_ensembles_naming_each_other(as_operator):
    assert add_ensemble(as_operator, "ping", calls="pong").status_code == 201  # pong is no ensemble yet
    answer = add_ensemble(as_operator, "pong", calls="ping")
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("ensemble 'pong' -> 'ping' -> 'pong' is a cycle")
    assert versions_of("pong") == []


def test_it_refuses_an_archive_whose_folders_call_each_other_before_recording_any(as_operator, store):
    archive = zip_of(
        {
            "ping/config.pbtxt": ensemble_pbtxt("ping", model="pong").encode(),
            "pong/config.pbtxt": ensemble_pbtxt("pong", model="ping").encode(),
        }
    )
    as_operator.post("/api/models/", {"name": "ping"}, format="json")
    answer = upload(as_operator, "ping", model_file(archive, "pair.zip"))
    assert answer.status_code == 400, answer.content
    assert answer.json()["detail"].startswith("ensemble 'pong' -> 'ping' -> 'pong' is a cycle")
    assert versions_of("ping") == [] and not RegisteredModel.objects.filter(name="pong").exists()
    assert not (store / "pong").exists()


def test_it_refuses_a_config_edit_that_closes_a_cycle(as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    assert add_ensemble(as_operator, "pair", calls="simple").status_code == 201
    edit = {"format": "pbtxt", "text": ensemble_pbtxt("pair", model="pair")}
    checked = as_operator.post("/api/models/pair/config/validate/", edit, format="json")
    assert checked.status_code == 200
    assert checked.json()["valid"] is False
    assert checked.json()["errors"][0].startswith("ensemble 'pair' -> 'pair' is a cycle")
    saved = as_operator.post("/api/models/pair/config/", {**edit, "action": "new_version"}, format="json")
    assert saved.status_code == 400
    assert saved.json()["detail"].startswith("ensemble 'pair' -> 'pair' is a cycle")
    assert versions_of("pair") == [1]


def test_it_refuses_a_v2_load_whose_config_closes_a_cycle(as_operator, operator):
    assert add_ensemble(as_operator, "ping", calls="simple").status_code == 201
    assert add_ensemble(as_operator, "pong", calls="ping").status_code == 201
    closing = {"ensemble_scheduling": {"step": [{"model_name": "pong", "input_map": {"INPUT0": "A"}}]}}
    closing["ensemble_scheduling"]["step"][0]["output_map"] = {"OUTPUT0": "SUM"}
    with pytest.raises(InvalidArgument, match="ensemble 'ping' -> 'pong' -> 'ping' is a cycle"):
        _new_version(lookups.caller_of(operator), "ping", None, closing)
    assert versions_of("ping") == [1]


def test_it_imports_the_rest_of_a_repository_and_refuses_an_ensemble_naming_itself(tmp_path):
    write_ensemble(tmp_path, "loop", ["X"], ["Y"], [step("loop", {"X": "X"}, {"Y": "Y"})])
    write_ensemble(tmp_path, "fine", ["X"], ["Y"], [step("simple", {"X": "X"}, {"Y": "Y"})])
    report = import_repository(tmp_path, log=lambda line: None)
    assert report.registered == ["fine/1"]
    assert report.failed == [
        "loop: ensemble 'loop' -> 'loop' is a cycle: an ensemble may not call itself, directly or through other "
        "ensembles"
    ]
    assert not RegisteredModel.objects.filter(name="loop").exists()
