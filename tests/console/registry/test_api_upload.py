"""POST /api/models/{name}/versions/: what is accepted, and every refusal with its reason."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, VersionState
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, tar_gz_of, upload, zip_of
from tests.engine.model_factory import SIMPLE_STRING_SOURCE, simple_string_config, to_pbtxt

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def registered(as_operator):
    assert as_operator.post("/api/models/", {"name": "simple"}, format="json").status_code == 201


def versions() -> list[tuple[int, str]]:
    return list(ModelVersion.objects.values_list("number", "state"))


def test_it_stores_a_single_onnx_file_and_auto_completes_its_config(as_operator, simple_onnx, store):
    answer = upload(as_operator, "simple", model_file(simple_onnx, "classifier.onnx"), notes="first")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["number"], body["state"], body["should_load"], body["notes"]) == (1, "PENDING", True, "first")
    assert body["artifact"] == "simple/1"
    assert body["config"]["platform"] == "onnxruntime_onnx"
    assert [t["name"] for t in body["config"]["input"]] == ["INPUT0", "INPUT1"]
    assert (store / "simple" / "1" / "model.onnx").read_bytes() == simple_onnx
    assert 'name: "simple"' in (store / "simple" / "config.pbtxt").read_text()
    assert not any((store / ".staging").iterdir())
    event = AuditEvent.objects.get(action="version.upload")
    assert (event.object, event.actor_name, event.detail["sha256"]) == ("simple/1", "otto", body["sha256"])


def test_it_numbers_versions_one_past_the_highest(as_operator, simple_onnx):
    for _ in range(2):
        assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    assert versions() == [(1, "PENDING"), (2, "PENDING")]


def test_it_takes_a_pbtxt_or_json_config_sent_with_the_file(as_operator, simple_onnx):
    pbtxt = SimpleUploadedFile("config.pbtxt", SIMPLE_PBTXT.encode())
    first = upload(as_operator, "simple", model_file(simple_onnx), config=pbtxt)
    assert first.status_code == 201, first.content
    assert first.json()["config"]["max_batch_size"] == 8
    as_json = json.dumps({"max_batch_size": 2, "dynamic_batching": {}})
    second = upload(as_operator, "simple", model_file(simple_onnx), config=as_json)
    assert second.status_code == 201, second.content
    assert second.json()["config"]["max_batch_size"] == 2


@pytest.mark.parametrize("packer", [zip_of, tar_gz_of], ids=["zip", "tar.gz"])
def test_it_unpacks_an_archive_of_a_version_folder(as_operator, simple_onnx, store, packer):
    suffix = ".zip" if packer is zip_of else ".tar.gz"
    archive = packer({"3/model.onnx": simple_onnx, "3/labels.txt": b"a\nb\n"})
    answer = upload(as_operator, "simple", model_file(archive, f"version{suffix}"))
    assert answer.status_code == 201, answer.content
    assert sorted(p.name for p in (store / "simple" / "1").iterdir()) == ["labels.txt", "model.onnx"]


def test_it_takes_the_config_packed_in_a_model_folder_archive(as_operator, simple_onnx, store):
    archive = zip_of({"simple/config.pbtxt": SIMPLE_PBTXT.encode(), "simple/1/model.onnx": simple_onnx})
    answer = upload(as_operator, "simple", model_file(archive, "simple.zip"))
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["max_batch_size"] == 8
    assert sorted(p.name for p in (store / "simple" / "1").iterdir()) == ["model.onnx"]


# ---- refusals: nothing stored


def test_it_answers_413_past_the_upload_limit(as_operator, settings, store):
    settings.INFERA = settings.INFERA.replace(max_upload_mb=1)
    answer = upload(as_operator, "simple", model_file(b"\0" * (1024 * 1024 + 1)))
    assert answer.status_code == 413
    assert "over the limit of 1 MB (INFERA_MAX_UPLOAD_MB)" in answer.json()["detail"]
    assert versions() == []
    assert not (store / "simple").exists()


def test_it_refuses_a_body_far_past_the_limit_before_reading_it(as_operator, settings):
    settings.INFERA = settings.INFERA.replace(max_upload_mb=1)
    answer = upload(as_operator, "simple", model_file(b"\0" * (4 * 1024 * 1024)))
    assert answer.status_code == 413


@pytest.mark.parametrize("packer", [zip_of, tar_gz_of], ids=["zip", "tar.gz"])
@pytest.mark.parametrize(
    ("member", "reason"),
    [
        ("../../evil/model.onnx", "climbs out of the archive with '..'"),
        ("/etc/model.onnx", "has an absolute path"),
        ("a/../../model.onnx", "climbs out of the archive with '..'"),
    ],
)
def test_it_refuses_an_archive_that_escapes(as_operator, simple_onnx, store, tmp_path, packer, member, reason):
    suffix = ".zip" if packer is zip_of else ".tar.gz"
    answer = upload(as_operator, "simple", model_file(packer({member: simple_onnx}), f"bad{suffix}"))
    assert answer.status_code == 400
    assert reason in answer.json()["detail"]
    assert versions() == []
    assert not (store / "simple").exists()
    assert not (tmp_path / "evil").exists()


@pytest.mark.parametrize("packer", [zip_of, tar_gz_of], ids=["zip", "tar.gz"])
def test_it_refuses_an_archive_with_a_symlink(as_operator, simple_onnx, store, packer):
    suffix = ".zip" if packer is zip_of else ".tar.gz"
    archive = packer({"model.onnx": simple_onnx}, links={"secrets": "/etc/passwd"})
    answer = upload(as_operator, "simple", model_file(archive, f"links{suffix}"))
    assert answer.status_code == 400
    assert "member 'secrets'" in answer.json()["detail"]
    assert "link" in answer.json()["detail"]
    assert versions() == []


@pytest.mark.parametrize(
    ("kind", "reason"),
    [(tarfile.LNKTYPE, "is a link"), (tarfile.FIFOTYPE, "is a device, pipe"), (tarfile.CHRTYPE, "is a device, pipe")],
    ids=["hardlink", "fifo", "char-device"],
)
def test_it_refuses_a_tar_with_links_or_special_files(as_operator, simple_onnx, kind, reason):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as bundle:
        info = tarfile.TarInfo("model.onnx")
        info.size = len(simple_onnx)
        bundle.addfile(info, io.BytesIO(simple_onnx))
        special = tarfile.TarInfo("odd")
        special.type = kind
        special.linkname = "model.onnx" if kind == tarfile.LNKTYPE else ""
        bundle.addfile(special)
    answer = upload(as_operator, "simple", model_file(buffer.getvalue(), "odd.tar.gz"))
    assert answer.status_code == 400
    assert f"member 'odd' {reason}" in answer.json()["detail"]
    assert versions() == []


def test_it_refuses_an_archive_that_unpacks_too_big(as_operator, settings):
    settings.INFERA = settings.INFERA.replace(max_unpacked_mb=1)
    archive = zip_of({"model.onnx": b"\0" * (2 * 1024 * 1024)})  # compresses to a few KB
    answer = upload(as_operator, "simple", model_file(archive, "bomb.zip"))
    assert answer.status_code == 400
    assert "unpacks to more than 1 MB" in answer.json()["detail"]


def test_it_refuses_an_archive_with_too_many_members(as_operator, settings):
    settings.INFERA = settings.INFERA.replace(max_archive_members=3)
    archive = zip_of({f"f{i}.txt": b"x" for i in range(5)})
    answer = upload(as_operator, "simple", model_file(archive, "many.zip"))
    assert answer.status_code == 400
    assert "more than 3 members" in answer.json()["detail"]


def test_it_refuses_a_file_that_is_no_model(as_operator):
    answer = upload(as_operator, "simple", model_file(b"hello", "notes.txt"))
    assert answer.status_code == 400
    assert "'notes.txt' is neither a model file" in answer.json()["detail"]


def test_it_refuses_an_archive_without_a_model_file(as_operator):
    answer = upload(as_operator, "simple", model_file(zip_of({"readme.md": b"hi"}), "v.zip"))
    assert answer.status_code == 400
    listed = "holds none of model.onnx, model.pt, model.pt2, model.py, model.gguf (it holds: readme.md)"
    assert listed in answer.json()["detail"]


def test_it_refuses_a_config_that_does_not_parse(as_operator, simple_onnx):
    answer = upload(as_operator, "simple", model_file(simple_onnx), config='name: "simple"\nmax_batch_sise: 8\n')
    assert answer.status_code == 400
    assert "max_batch_sise" in json.dumps(answer.json())
    assert versions() == []


def test_it_refuses_python_models_from_an_operator(as_operator, store):
    answer = upload(as_operator, "simple", model_file(SIMPLE_STRING_SOURCE.encode(), "model.py"))
    assert answer.status_code == 403
    assert answer.json()["detail"] == (
        "upload refused: only admins may upload python-backend models or other models that run code "
        "(model.py runs code inside the server)"
    )
    assert versions() == []
    assert not (store / "simple").exists()


def test_it_accepts_python_models_from_an_admin(as_admin):
    config = to_pbtxt(simple_string_config("simple"))
    answer = upload(as_admin, "simple", model_file(SIMPLE_STRING_SOURCE.encode(), "model.py"), config=config)
    assert answer.status_code == 201, answer.content
    assert answer.json()["config"]["backend"] == "python"


def test_it_refuses_python_models_when_the_server_disallows_them(as_admin, settings):
    settings.INFERA = settings.INFERA.replace(allow_python_models=False)
    answer = upload(as_admin, "simple", model_file(SIMPLE_STRING_SOURCE.encode(), "model.py"))
    assert answer.status_code == 403
    assert "INFERA_ALLOW_PYTHON_MODELS=false" in answer.json()["detail"]


def test_it_refuses_viewers(as_viewer, simple_onnx):
    assert upload(as_viewer, "simple", model_file(simple_onnx)).status_code == 403


# ---- refusals by the engine: the version is kept as FAILED with the reason


def test_it_keeps_a_corrupt_onnx_as_failed_with_its_reason(as_operator, store):
    answer = upload(as_operator, "simple", model_file(b"this is not a protobuf", "model.onnx"))
    assert answer.status_code == 400
    body = answer.json()
    assert body["detail"].startswith("version 1 of 'simple' failed its trial load: ")
    assert "model.onnx" in body["detail"]
    assert (body["version"]["number"], body["version"]["state"]) == (1, "FAILED")
    assert body["version"]["error"] in body["detail"]
    assert versions() == [(1, VersionState.FAILED)]
    assert not (store / "simple" / "1").exists()
    assert AuditEvent.objects.get(action="version.upload").detail["state"] == "FAILED"


def test_it_says_a_failed_upload_cannot_be_loaded_again(as_operator, simple_onnx):
    """An upload that failed its checks kept no files: a retry would fail the same way, so none is offered."""
    assert upload(as_operator, "simple", model_file(simple_onnx)).json()["loadable"] is True
    garbage = upload(as_operator, "simple", model_file(b"this is not a protobuf", "model.onnx"))
    assert garbage.json()["version"]["loadable"] is False
    listed = as_operator.get("/api/models/simple/versions/").json()
    assert [(v["number"], v["state"], v["loadable"]) for v in listed] == [(1, "PENDING", True), (2, "FAILED", False)]
    answer = as_operator.post("/api/models/simple/versions/2/load")
    assert answer.status_code == 409
    assert answer.json()["detail"] == "version 2 of 'simple' has no files in the store to load"


def test_it_keeps_a_version_whose_config_contradicts_the_model_as_failed(as_operator, simple_onnx):
    wrong = SIMPLE_PBTXT.replace("dims: [16]", "dims: [15]", 1)
    answer = upload(as_operator, "simple", model_file(simple_onnx), config=wrong)
    assert answer.status_code == 400
    detail = answer.json()["detail"]
    assert "input 'INPUT0' has dims [15] in config but [16] in the model" in detail
    assert versions() == [(1, VersionState.FAILED)]


def test_it_checks_a_new_version_against_the_active_config(as_operator, simple_onnx, mlp_onnx):
    assert upload(as_operator, "simple", model_file(simple_onnx)).status_code == 201
    answer = upload(as_operator, "simple", model_file(mlp_onnx))
    assert answer.status_code == 400
    assert "input 'INPUT0' is TYPE_INT32 in config but TYPE_FP32 in the model" in answer.json()["detail"]
    assert versions() == [(1, "PENDING"), (2, "FAILED")]


def test_a_failed_upload_leaves_the_active_version_alone(as_operator, simple_onnx, store):
    upload(as_operator, "simple", model_file(simple_onnx))
    config_before = (store / "simple" / "config.pbtxt").read_text()
    upload(as_operator, "simple", model_file(b"junk", "model.onnx"), activate="true")
    assert as_operator.get("/api/models/simple/").json()["active_version"] == 1
    assert (store / "simple" / "config.pbtxt").read_text() == config_before
