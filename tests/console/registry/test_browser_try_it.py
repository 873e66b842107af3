"""In headless Chromium against a real server: every seeded model's Try it sends the request it builds by itself
and gets 200 (sequence models with a correlation id, image models with the bundled sample PNG, digits a real
digit); the curl and tritonclient snippets follow the request."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 120_000  # every demo model loading on two busy cores
TRIED = {
    "simple",
    "simple_string",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_sequence_onnx",
    "digits",
    "digits_preprocess",
    "digits_postprocess",
    "digits_pipeline",
}


def open_try_it(page, server: ServerProcess, name: str) -> None:
    """Open the model's page once Try it has built its request."""
    page.goto(f"{server.base_url}/models/{name}/")
    page.wait_for_selector("#try-form[data-ready=true]", timeout=WAIT_MS)


def try_default(page, server: ServerProcess, name: str) -> tuple[str, dict]:
    """Open the model's page, send Try it's own default; the HTTP status and the answer."""
    open_try_it(page, server, name)
    page.click("#try-send")
    page.wait_for_selector("#try-status[data-http-status]", timeout=WAIT_MS)
    status = page.get_attribute("#try-status", "data-http-status")
    return status, json.loads(page.inner_text("#try-answer"))


def test_it_answers_200_to_every_seeded_models_default(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    failed = {}
    for name in sorted(TRIED):
        status, answer = try_default(page, infera_server, name)
        if status != "200":
            failed[name] = (status, answer)
    assert failed == {}


def test_it_sends_a_real_digit_and_a_sample_image(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    open_try_it(page, infera_server, "digits")
    sent = json.loads(page.input_value("#try-body"))["inputs"][0]["data"]
    assert any(sent), "the default is a digit, not zeros"

    _, answer = try_default(page, infera_server, "digits_pipeline")
    label = next(output for output in answer["outputs"] if output["name"] == "LABEL")
    assert label["data"] == ["3"]  # the sample digit, read through the whole pipeline


def test_it_gives_a_sequence_a_correlation_id_and_its_controls(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    open_try_it(page, infera_server, "simple_sequence")
    page.fill("#try-sequence-id", "4242")
    page.uncheck("#try-sequence-end")
    page.click("summary:has-text('The same request from code')")
    assert "sequence_id=4242, sequence_start=True, sequence_end=False" in page.inner_text("#try-python")
    assert '"sequence_id":4242' in page.inner_text("#try-curl")
    page.click("#try-send")
    page.wait_for_selector("#try-status[data-http-status]", timeout=WAIT_MS)
    assert page.get_attribute("#try-status", "data-http-status") == "200"
