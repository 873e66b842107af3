"""The overview (home page) in headless Chromium against a real server: its numbers move under load."""

from __future__ import annotations

import pytest

from tests.conftest import ARTIFACTS, ServerProcess, sign_in
from tests.console.monitoring.conftest import steady_load

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 60_000
REQUESTS_NOW = "Number(document.getElementById('figure-now-requests_per_s').dataset.value || 0)"
SPARK_PEAK = "Number(document.querySelector('[data-sparkline=simple]').dataset.peak || 0)"


def test_it_shows_requests_per_second_rise_under_load(infera_server: ServerProcess, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, infera_server)
    page.wait_for_selector("#connection-state[data-state=live]", timeout=WAIT_MS)
    page.wait_for_function("document.getElementById('figure-now-requests_per_s').dataset.value !== undefined")
    assert page.locator("#model-cards [data-model=simple]").count() == 1
    with steady_load(infera_server) as sent:
        page.wait_for_function(f"{REQUESTS_NOW} > 0", timeout=WAIT_MS)
        page.wait_for_function(f"{SPARK_PEAK} > 0", timeout=WAIT_MS)
        card_rate = page.locator("#card-simple [data-live-field=success_per_s]")
        page.wait_for_function(
            "document.querySelector('#card-simple [data-live-field=success_per_s]').textContent.endsWith('/s')"
            " && document.querySelector('#card-simple [data-live-field=success_per_s]').textContent !== '0.0/s'",
            timeout=WAIT_MS,
        )
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "overview.png"), full_page=True)
    assert sent[0] > 0
    assert card_rate.text_content() != "–"
    assert page.locator("#figure-now-p99_ms").text_content().endswith(" ms")
    # a page drawn before the first sample gets its device panel on its next refresh
    page.wait_for_selector(".device meter[data-field=utilization]", timeout=WAIT_MS)
    assert page.locator("#sampler-note").is_hidden()
    assert errors == []
