"""INFERA_DEMO_MODELS and `serve --demo-models`: which demo models seeding writes, by validated name (default all)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from console.config import DEMO_MODELS, read_settings
from console.demo.repository import seed_repository
from console.env import EnvError


def test_it_seeds_every_demo_model_unless_told_otherwise():
    assert read_settings({}).demo_models == DEMO_MODELS
    assert len(DEMO_MODELS) == 10 and "smollm2" in DEMO_MODELS and "all-minilm-l6-v2" in DEMO_MODELS


def test_it_reads_the_names_in_the_demos_own_order():
    assert read_settings({"INFERA_DEMO_MODELS": " smollm2 ,simple"}).demo_models == ("simple", "smollm2")


def test_it_refuses_a_name_that_is_no_demo_model():
    with pytest.raises(EnvError, match="INFERA_DEMO_MODELS: no demo model 'smollm3'; choose among simple,"):
        read_settings({"INFERA_DEMO_MODELS": "simple,smollm3"})


def test_it_writes_only_the_models_named(tmp_path: Path):
    report = seed_repository(tmp_path, log=lambda line: None, models=("simple_string", "simple"))
    assert report.created == ["simple/1", "simple_string/1"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["simple", "simple_string"]


def test_it_brings_the_pipelines_steps_and_digits_with_it(tmp_path: Path):
    for number in (1, 2):  # trained already: the digits versions are kept, not trained again
        (tmp_path / "digits" / str(number)).mkdir(parents=True)
    report = seed_repository(tmp_path, log=lambda line: None, models=("digits_pipeline",))
    assert sorted(report.created) == ["digits_pipeline/1", "digits_postprocess/1", "digits_preprocess/1"]
    assert report.kept == ["digits/1", "digits/2"]
    assert (tmp_path / "digits" / "config.pbtxt").is_file()


def test_the_seed_command_takes_the_names_too(tmp_path: Path):
    out = io.StringIO()
    call_command("seed_demo", store=tmp_path, models="simple", stdout=out)
    assert "created simple/1" in out.getvalue()
    assert [path.name for path in tmp_path.iterdir()] == ["simple"]
    with pytest.raises(CommandError, match="--models: no demo model 'digit'"):
        call_command("seed_demo", store=tmp_path, models="digit")


def test_serve_refuses_an_unknown_demo_model_before_anything_starts():
    with pytest.raises(CommandError, match="--demo-models: no demo model 'all-minilm'"):
        call_command("serve", "--demo-models", "simple,all-minilm")
