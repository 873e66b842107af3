"""In headless Chromium against the seeded server after every demo model has answered: no chart on the monitoring
page or a model's traffic tab shows a legend of more than 10 entries (past the eight busiest, models go to "others",
which the model filter opens), a chart says why it is empty instead of drawing bare axes, and a chart of counts ticks
whole numbers (0 1 2 3 4, not 0.2 0.4)."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in
from tests.console.registry.test_browser_try_it import TRIED, try_default

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 120_000
MOST_ENTRIES = 10
LEGENDS = """() => [...document.querySelectorAll('.js-plotly-plot')]
  .map((chart) => [chart.id, chart.querySelectorAll('.legend .traces').length])"""


def test_it_shows_no_legend_of_more_than_ten_entries(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    page.set_viewport_size({"width": 1400, "height": 900})
    sign_in(page, infera_server)
    for name in sorted(TRIED):
        try_default(page, infera_server, name)  # every model has answered at least once
    for path in ("/monitoring/", "/monitoring/?split=versions", "/models/digits/#traffic"):
        page.goto(infera_server.base_url + path, wait_until="networkidle")
        page.wait_for_selector(".js-plotly-plot .legend .traces", timeout=WAIT_MS)
        legends = dict(page.evaluate(LEGENDS))
        assert legends and max(legends.values()) <= MOST_ENTRIES, (path, legends)


def test_it_says_why_a_chart_is_empty(infera_server: ServerProcess, page):
    """Narrowed to `simple`, which never opens a sequence, the sequences chart is empty whatever other tests sent
    (a request that waited in a queue meanwhile would fill the pending chart)."""
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/monitoring/?model=simple", wait_until="networkidle")
    page.wait_for_selector('#chart-sequences[data-empty="true"] .annotation-text', timeout=WAIT_MS)
    assert "No sequence open" in page.text_content("#chart-sequences .annotation-text")
    ticks = page.eval_on_selector_all("#chart-sequences .ytick text", "ticks => ticks.map((tick) => tick.textContent)")
    assert ticks == ["0", "1", "2", "3", "4"]
