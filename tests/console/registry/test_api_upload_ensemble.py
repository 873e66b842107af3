"""Uploading ensembles: a config and no model file, an archive of its folder, or one of several model folders."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEvent
from console.demo.pipeline import PIPELINE_CONFIG, PREPROCESS_CONFIG, PREPROCESS_MODEL_PY
from console.registry.models import ModelVersion, RegisteredModel
from tests.console.registry.conftest import (
    SIMPLE_PBTXT,
    ensemble_pbtxt,
    model_file,
    tar_gz_of,
    upload,
    upload_config,
    zip_of,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def registered(as_operator):
    assert as_operator.post("/api/models/", {"name": "pair"}, format="json").status_code == 201


def versions() -> list[tuple[str, int, str]]:
    return list(ModelVersion.objects.order_by("model__name", "number").values_list("model__name", "number", "state"))


def test_it_adds_an_ensemble_version_from_a_config_alone(as_operator, store):
    answer = upload_config(as_operator, "pair", ensemble_pbtxt(), notes="first")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["number"], body["state"], body["is_active"]) == (1, "PENDING", True)
    assert body["config"]["platform"] == "ensemble"
    assert body["config"]["ensemble_scheduling"]["step"][0]["model_name"] == "simple"
    assert body["companions"] == []
    assert (store / "pair" / "1").is_dir() and not any((store / "pair" / "1").iterdir())
    assert 'platform: "ensemble"' in (store / "pair" / "config.pbtxt").read_text()


def test_it_adds_another_ensemble_version_with_neither_file_nor_config(as_operator):
    upload_config(as_operator, "pair", ensemble_pbtxt())
    answer = as_operator.post("/api/models/pair/versions/", {"notes": "same steps"}, format="multipart")
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["ensemble_scheduling"]["step"][0]["model_name"] == "simple"
    assert versions() == [("pair", 1, "PENDING"), ("pair", 2, "PENDING")]


def test_it_refuses_a_config_alone_for_a_model_that_is_no_ensemble(as_operator, store):
    answer = upload_config(as_operator, "pair", SIMPLE_PBTXT.replace('"simple"', '"pair"'))
    assert answer.status_code == 400
    assert "send a model file" in answer.json()["detail"]
    assert 'only an ensemble (platform: "ensemble") has versions without one' in answer.json()["detail"]
    assert versions() == []
    assert not (store / "pair").exists()


def test_it_keeps_an_ensemble_whose_steps_do_not_add_up_as_failed(as_operator):
    broken = ensemble_pbtxt().replace('value: "SUM"', 'value: "TOTAL"')  # SUM is never produced
    answer = upload_config(as_operator, "pair", broken)
    assert answer.status_code == 400
    assert "SUM" in answer.json()["detail"]
    assert versions() == [("pair", 1, "FAILED")]


@pytest.mark.parametrize(
    "members",
    [
        {"pair/config.pbtxt": ensemble_pbtxt().encode(), "pair/1/": b""},
        {"pair/config.pbtxt": ensemble_pbtxt().encode()},
        {"config.pbtxt": ensemble_pbtxt().encode()},
    ],
    ids=["model-folder", "model-folder-without-version", "config-only"],
)
def test_it_unpacks_an_archive_of_an_ensemble_with_no_model_file(as_operator, store, members):
    answer = upload(as_operator, "pair", model_file(zip_of(members), "pair.zip"))
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["platform"] == "ensemble"
    assert not any((store / "pair" / "1").iterdir())


def test_it_adds_a_version_of_each_model_folder_in_an_archive_of_several(as_admin, operator, simple_onnx, store):
    archive = tar_gz_of(
        {
            "repository/pair/config.pbtxt": ensemble_pbtxt().encode(),
            "repository/simple/config.pbtxt": SIMPLE_PBTXT.encode(),
            "repository/simple/7/model.onnx": simple_onnx,
            "repository/README.md": b"an ensemble and the model it calls",
        }
    )
    answer = upload(as_admin, "pair", model_file(archive, "pipeline.tar.gz"), notes="together")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["number"] == 1
    assert body["companions"] == [{"model": "simple", "number": 1, "state": "PENDING"}]
    assert versions() == [("pair", 1, "PENDING"), ("simple", 1, "PENDING")]
    simple = RegisteredModel.objects.get(name="simple")
    assert simple.active_number == 1 and simple.platform == "onnxruntime_onnx"
    assert (store / "simple" / "1" / "model.onnx").read_bytes() == simple_onnx
    assert ModelVersion.objects.get(model__name="simple").notes == "together"
    uploaded = list(AuditEvent.objects.filter(action="version.upload").order_by("id").values_list("object", flat=True))
    assert uploaded == ["simple/1", "pair/1"]  # the model the ensemble calls comes first
    assert AuditEvent.objects.filter(action="model.register", object="simple").exists()


def test_it_adds_a_version_to_a_registered_companion_and_activates_it_when_asked(as_operator, simple_onnx):
    as_operator.post("/api/models/", {"name": "simple"}, format="json")
    upload(as_operator, "simple", model_file(simple_onnx))
    archive = zip_of(
        {
            "pair/config.pbtxt": ensemble_pbtxt().encode(),
            "simple/1/model.onnx": simple_onnx,
        }
    )
    answer = upload(as_operator, "pair", model_file(archive, "pipeline.zip"), activate="true")
    assert answer.status_code == 201, answer.content
    assert answer.json()["companions"] == [{"model": "simple", "number": 2, "state": "PENDING"}]
    assert AuditEvent.objects.filter(action="version.activate", object="simple/2").exists()


def test_it_refuses_an_archive_of_model_folders_without_the_uploaded_model(as_operator, simple_onnx):
    archive = zip_of({"simple/1/model.onnx": simple_onnx, "other/config.pbtxt": ensemble_pbtxt("other").encode()})
    answer = upload(as_operator, "pair", model_file(archive, "models.zip"))
    assert answer.status_code == 400
    assert answer.json()["detail"] == (
        "the archive holds the model folders other, simple, and none named 'pair' (the model this upload is for)"
    )
    assert versions() == []


def test_it_refuses_a_model_folder_with_several_versions(as_operator, simple_onnx):
    archive = zip_of(
        {
            "pair/config.pbtxt": ensemble_pbtxt().encode(),
            "simple/1/model.onnx": simple_onnx,
            "simple/2/model.onnx": simple_onnx,
        }
    )
    answer = upload(as_operator, "pair", model_file(archive, "models.zip"))
    assert answer.status_code == 400
    assert (
        "model folder 'simple' holds versions 1, 2; an upload adds one version of each model" in answer.json()["detail"]
    )
    assert not RegisteredModel.objects.filter(name="simple").exists()


def test_it_refuses_a_companion_without_its_model_file(as_operator):
    archive = zip_of({"pair/config.pbtxt": ensemble_pbtxt().encode(), "simple/config.pbtxt": SIMPLE_PBTXT.encode()})
    answer = upload(as_operator, "pair", model_file(archive, "models.zip"))
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("model folder 'simple' holds none of model.onnx")
    assert versions() == []


def test_it_refuses_code_in_a_companion_before_recording_anything(as_operator, store):
    archive = zip_of(
        {
            "pair/config.pbtxt": PIPELINE_CONFIG.replace("digits_pipeline", "pair").encode(),
            "digits_preprocess/config.pbtxt": PREPROCESS_CONFIG.encode(),
            "digits_preprocess/1/model.py": PREPROCESS_MODEL_PY.encode(),
        }
    )
    answer = upload(as_operator, "pair", model_file(archive, "pipeline.zip"))
    assert answer.status_code == 403
    assert "only admins may upload python-backend models" in answer.json()["detail"]
    assert versions() == []
    assert not RegisteredModel.objects.filter(name="digits_preprocess").exists()
    assert not (store / "digits_preprocess").exists()


def test_it_names_the_companion_whose_trial_load_failed(as_operator):
    archive = zip_of({"pair/config.pbtxt": ensemble_pbtxt().encode(), "simple/1/model.onnx": b"not a protobuf"})
    answer = upload(as_operator, "pair", model_file(archive, "pipeline.zip"))
    assert answer.status_code == 400
    assert answer.json()["detail"].startswith("model folder 'simple': version 1 of 'simple' failed its trial load: ")
    assert versions() == [("simple", 1, "FAILED")]  # the ensemble is not added after it


@pytest.mark.parametrize("name", ["version", "unpacked"])
def test_it_stores_a_model_named_like_a_staging_folder(as_operator, simple_onnx, store, name):
    assert as_operator.post("/api/models/", {"name": name}, format="json").status_code == 201
    answer = upload(as_operator, name, model_file(zip_of({"1/model.onnx": simple_onnx}), "v.zip"))
    assert answer.status_code == 201, answer.content
    assert (store / name / "1" / "model.onnx").is_file()
