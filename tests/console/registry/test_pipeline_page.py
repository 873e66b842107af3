"""An ensemble's page draws its pipeline: a box per step linking to its model, tensors as labelled edges."""

from __future__ import annotations

import re

import pytest

from console.demo.pipeline import PIPELINE_CONFIG, PREPROCESS_CONFIG
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from engine.config.text_format import config_to_dict, parse_config_pbtxt
from tests.console.accounts.conftest import signed_in

pytestmark = pytest.mark.django_db


def register(name: str, config_text: str, numbers: tuple[int, ...] = (1,), active: int = 1) -> RegisteredModel:
    """A model with READY versions holding `config_text`, as an import leaves it."""
    config = config_to_dict(parse_config_pbtxt(config_text))
    model = RegisteredModel.objects.create(name=name, platform=config.get("platform", ""))
    for number in numbers:
        version = ModelVersion.objects.create(model=model, number=number, state=VersionState.READY, config=config)
        if number == active:
            model.active_version = version
    model.save()
    return model


@pytest.fixture
def pipeline_models() -> None:
    """digits_pipeline, with digits (two versions, 2 active) and digits_preprocess registered; the postprocess not."""
    register("digits_pipeline", PIPELINE_CONFIG)
    register("digits_preprocess", PREPROCESS_CONFIG)
    register("digits", 'name: "digits" platform: "onnxruntime_onnx"', numbers=(1, 2), active=2)


def steps_of(html: str) -> list[str]:
    return re.findall(r'<g class="pipeline-step[^"]*" data-step="\d+"\s+data-model="([^"]+)"', html)


def test_it_draws_each_step_as_a_box_linking_to_its_model(viewer, pipeline_models):
    html = signed_in(viewer).get("/models/digits_pipeline/").content.decode()
    assert 'id="pipeline" data-steps="3"' in html
    assert steps_of(html) == ["digits_preprocess", "digits", "digits_postprocess"]
    assert '<a href="/models/digits_preprocess/">' in html
    assert '<a href="/models/digits/">' in html
    assert '<a href="/models/digits_postprocess/">' not in html  # not registered: nothing to link to
    assert "not registered" in html


def test_it_shows_the_version_each_step_uses(viewer, pipeline_models):
    html = signed_in(viewer).get("/models/digits_pipeline/").content.decode()
    # -1: no engine runs in this test, so the served version is the registry's active one
    assert re.search(r'data-model="digits" data-version="2">', html)
    assert "v2 (served)" in html
    assert "v1 (served)" in html


def test_it_labels_the_tensors_between_steps(viewer, pipeline_models):
    html = signed_in(viewer).get("/models/digits_pipeline/").content.decode()
    edges = re.findall(r'<g class="pipeline-edge" data-tensor="([^"]+)" data-from="([^"]+)" data-to="([^"]+)"', html)
    assert edges == [
        ("IMAGE", "in:IMAGE", "step:0"),
        ("pixels", "step:0", "step:1"),
        ("probabilities", "step:1", "step:2"),
        ("LABEL", "step:2", "out:LABEL"),
        ("TOP3", "step:2", "out:TOP3"),
        ("TOP3_CLASSES", "step:2", "out:TOP3_CLASSES"),
    ]
    labels = re.findall(r'<text class="pipeline-edge-label"[^>]*>([^<]+)</text>', html)
    assert labels == ["IMAGE", "pixels", "probabilities", "LABEL", "TOP3", "TOP3_CLASSES"]


def test_each_step_carries_a_live_throughput_hook(viewer, pipeline_models):
    html = signed_in(viewer).get("/models/digits_pipeline/").content.decode()
    for name in ("digits_preprocess", "digits", "digits_postprocess"):
        assert f'data-live-model="{name}" data-live-field="inferences_per_s"' in html
    assert "monitoring/live.js" in html
    assert "style=" not in html.split('id="pipeline"')[1]  # the CSP allows no inline style


def test_a_model_that_is_no_ensemble_has_no_pipeline(viewer, pipeline_models):
    html = signed_in(viewer).get("/models/digits/").content.decode()
    assert 'id="pipeline"' not in html
    assert '<a href="/models/digits_pipeline/">digits_pipeline</a>' in html  # it is used by the pipeline


def test_an_ensemble_page_tells_uploaders_no_model_file_is_needed(operator, pipeline_models):
    html = signed_in(operator).get("/models/digits_pipeline/").content.decode()
    assert 'id="ensemble-upload-hint"' in html
