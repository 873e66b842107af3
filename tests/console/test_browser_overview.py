"""The overview (home page) in headless Chromium against a real server: its numbers move under load, and the hour
chart draws the minute in progress (never blank while traffic flows) on axes of nice ticks."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest

from tests.conftest import ARTIFACTS, ServerProcess, sign_in
from tests.console.monitoring.conftest import steady_load

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 60_000
REQUESTS_NOW = "Number(document.getElementById('figure-now-requests_per_s').dataset.value || 0)"
SPARK_PEAK = "Number(document.querySelector('[data-sparkline=simple]').dataset.peak || 0)"
# `data` appears once Plotly has drawn the chart: until then the predicate answers false (a throw would end the wait)
HOUR_REQUESTS = "document.getElementById('hour-chart').data?.[0]?.y?.some((y) => y > 0) === true"
TICKS = "(selector) => [...document.querySelectorAll(selector)].map((tick) => tick.textContent.replace(/,/g, ''))"


def nice_steps(ticks: list[str]) -> bool:
    """Whether tick labels step evenly by 1, 2 or 5 times a power of ten (not 0.275, 0.551, as a synced axis does)."""
    values = [float(tick) for tick in ticks]
    steps = {round(b - a, 9) for a, b in pairwise(values)}
    if len(steps) != 1:
        return False
    step = steps.pop()
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, nice) for nice in (1, 2, 5))


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


def test_it_draws_the_minute_in_progress_on_the_hour_chart(infera_server: ServerProcess, page):
    sign_in(page, infera_server)
    page.wait_for_selector("#connection-state[data-state=live]", timeout=WAIT_MS)
    with steady_load(infera_server):
        page.wait_for_function(HOUR_REQUESTS, timeout=WAIT_MS)  # well before the first minute closes
        page.wait_for_function("document.getElementById('hour-chart').dataset.empty === 'false'", timeout=WAIT_MS)
        requests = page.evaluate(TICKS, "#hour-chart .ytick text")
        latency = page.evaluate(TICKS, "#hour-chart .y2tick text")
    assert nice_steps(requests), requests
    assert len(latency) < 2 or nice_steps(latency), latency
    assert page.locator("#hour-chart .annotation-text").count() == 0
