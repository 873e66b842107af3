"""In headless Chromium against a real (seeded) server: digits_pipeline's page draws its three steps as a graph."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ARTIFACTS, ServerProcess, engine_front_end_missing, sign_in
from tests.console.registry.test_browser_versions import click_confirmed

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000  # the seeded models load on two busy cores
STEPS = ["digits_preprocess", "digits", "digits_postprocess"]


def test_it_draws_the_digits_pipeline_with_linked_steps_and_labelled_tensors(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits_pipeline/#monitoring")
    page.wait_for_selector("#pipeline svg.pipeline-graph")

    steps = page.locator("#pipeline g.pipeline-step")
    assert steps.count() == 3
    assert [steps.nth(i).get_attribute("data-model") for i in range(3)] == STEPS
    for name in STEPS:
        assert page.locator(f'#pipeline g.pipeline-step a[href="/models/{name}/"]').count() == 1
        version = page.text_content(f'#pipeline g.pipeline-step[data-model="{name}"] .pipeline-step-version')
        assert re.fullmatch(r"v\d+ \(served\)", version), version
    lefts = [steps.nth(i).bounding_box()["x"] for i in range(3)]
    assert lefts == sorted(lefts) and len(set(lefts)) == 3  # left to right, one column per step

    labels = page.locator("#pipeline .pipeline-edge-label").all_text_contents()
    assert labels == ["IMAGE", "pixels", "probabilities", "LABEL", "TOP3", "TOP3_CLASSES"]

    # each step's throughput comes live from the metrics stream
    for name in STEPS:
        page.wait_for_selector(f'#pipeline tspan[data-live-model="{name}"][data-live-state="live"]', timeout=WAIT_MS)
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#pipeline").screenshot(path=str(ARTIFACTS / "digits_pipeline_graph.png"))

    page.click('#pipeline g.pipeline-step[data-model="digits"] a')
    page.wait_for_url(infera_server.base_url + "/models/digits/")
    assert "digits_pipeline" in page.inner_text("#used-by")
    page.click("#tab-config")
    click_confirmed(page, "#delete-model")
    page.wait_for_selector("#delete-result.bad")
    assert page.inner_text("#delete-result") == (
        "model 'digits' is used by the ensemble 'digits_pipeline': change or delete it first"
    )


def test_it_uploads_an_ensemble_version_from_a_config_alone(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits_pipeline/")
    page.wait_for_selector('#version-rows tr[data-version="1"]')
    config = (infera_server.var_dir / "models" / "digits_pipeline" / "config.pbtxt").read_bytes()
    page.click("#upload-open")
    page.set_input_files("#upload-config", files=[{"name": "config.pbtxt", "mimeType": "text/plain", "buffer": config}])
    page.click("#upload-button")
    page.wait_for_selector("#upload-result.ok", timeout=WAIT_MS)
    number = re.search(r"Version (\d+) uploaded", page.inner_text("#upload-result")).group(1)

    # leave digits_pipeline as the session found it
    row = f'#version-rows tr[data-version="{number}"]'
    page.wait_for_selector(row)
    click_confirmed(page, f'{row} button[data-action="delete"]')
    page.wait_for_selector(row, state="detached")
