"""The monitoring page in headless Chromium against the seeded server: digits_pipeline selected by a link, the
ensemble and its three steps live under load."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from console.demo.pipeline import digit_image, png_bytes
from tests.conftest import ARTIFACTS, ServerProcess, engine_front_end_missing
from tests.console.monitoring.conftest import steady_load
from tests.console.monitoring.test_browser_monitoring import TRACE, open_monitoring

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000  # the seeded models load on busy cores
STEPS = ["step 0 · digits_preprocess", "step 1 · digits", "step 2 · digits_postprocess"]
ENSEMBLE = "digits_pipeline (ensemble)"

# the text of one cell of the steps table: [row, field]
CELL = """([row, field]) =>
  document.querySelector(`#pipeline-steps tr[data-row="${row}"] td[data-field="${field}"]`).textContent"""


@contextmanager
def pipeline_requests(server: ServerProcess) -> Iterator[Callable[[], None]]:
    """A function sending one PNG of a digit to digits_pipeline over HTTP (tritonclient, binary BYTES)."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.base_url.removeprefix("http://"))
    image = np.array([[png_bytes(digit_image(np.arange(64) % 17))]], dtype=object)

    def infer() -> None:
        tensor = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
        tensor.set_data_from_numpy(image)
        client.infer("digits_pipeline", [tensor])

    try:
        yield infer
    finally:
        client.close()


def test_it_shows_the_ensemble_and_its_steps_moving_under_load(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    assert infera_server.wait_for("/v2/models/digits_pipeline/ready", timeout=WAIT_MS / 1000) == 200
    errors = open_monitoring(page, infera_server, "?model=digits_pipeline")
    page.wait_for_selector("#pipeline-panel:not([hidden])", timeout=WAIT_MS)
    assert page.input_value("#model-select") == "digits_pipeline"
    assert page.locator("#pipeline-options option[value=digits_pipeline]").count() == 1
    rows = page.locator("#pipeline-steps tbody tr")
    assert [rows.nth(i).get_attribute("data-row") for i in range(rows.count())] == [
        "ensemble",
        "step 0",
        "step 1",
        "step 2",
        "outside",
    ]
    assert page.locator('#pipeline-steps td[data-field="model"]').all_text_contents() == [
        "digits_pipeline",
        "digits_preprocess",
        "digits",
        "digits_postprocess",
        "outside the steps",
    ]

    with pipeline_requests(infera_server) as infer, steady_load(infera_server, infer) as sent:
        for name in (ENSEMBLE, *STEPS):
            page.wait_for_function(f"({TRACE})(['chart-pipeline-throughput', {name!r}]).peak > 0", timeout=WAIT_MS)
            page.wait_for_function(f"({TRACE})(['chart-pipeline-latency', '{name} p50']).peak > 0", timeout=WAIT_MS)
        for name in STEPS:
            page.wait_for_function(f"({TRACE})(['chart-pipeline-time', {name!r}]).peak > 0", timeout=WAIT_MS)
            page.wait_for_function(
                f"({TRACE})(['chart-pipeline-queue-compute', '{name} compute']).peak > 0", timeout=WAIT_MS
            )
        # the traces move: they grow by a point a second while the table refills
        before = page.evaluate(TRACE, ["chart-pipeline-throughput", STEPS[1]])["points"]
        updates = int(page.get_attribute("#pipeline-panel", "data-updates"))
        page.wait_for_function(
            f"({TRACE})(['chart-pipeline-throughput', {STEPS[1]!r}]).points >= {before + 3}", timeout=WAIT_MS
        )
        page.wait_for_function(
            f"({CELL})(['step 1', 'success_per_s']) !== '–' && ({CELL})(['step 1', 'share']).endsWith('%')",
            timeout=WAIT_MS,
        )
        assert int(page.get_attribute("#pipeline-panel", "data-updates")) >= updates + 3
        # the steps' calls come from inside the server: the protocol chart counts each request once, as it came
        page.wait_for_function(f"({TRACE})(['chart-protocols', 'HTTP']).peak > 0", timeout=WAIT_MS)
        assert page.evaluate(TRACE, ["chart-protocols", "ENSEMBLE"])["points"] == -1
        assert sent[0] > 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitoring_pipeline.png"), full_page=True)
    assert page.evaluate(CELL, ["step 1", "version"]).startswith("served (v")
    assert errors == []
