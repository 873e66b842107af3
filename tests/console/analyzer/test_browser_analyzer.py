"""In headless Chromium against a real server: an analysis of a small model over a 2-config grid runs end to end, its
chart appears with a recommendation, and applying it creates a version that serves."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess
from tests.console.registry.test_browser_config_editor import copy_of_simple
from tests.console.registry.test_browser_versions import click_confirmed

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 120_000  # two configs loaded and measured, then a trial load, on two busy cores


def test_it_runs_an_analysis_charts_it_and_applies_the_recommendation(infera_server: ServerProcess, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    with copy_of_simple(page, infera_server, "analyzed"):
        page.goto(infera_server.base_url + "/models/analyzed/#analyzer")
        page.wait_for_selector(
            '#version-rows tr[data-version="1"][data-state="READY"]', state="attached", timeout=WAIT_MS
        )
        page.wait_for_selector("#analysis-rows :text('No analysis yet.')")

        page.fill("#analysis-budget", "60000")  # generous: the test is about the flow, not this machine's speed
        page.fill("#analysis-concurrency", "2")
        page.fill("#analysis-batch-sizes", "8")
        page.fill("#analysis-delays", "0, 500")
        page.fill("#analysis-instances", "1")
        page.fill("#analysis-seconds", "0.3")
        assert page.inner_text("#analysis-plan").startswith("2 configs × concurrency 1, 2")
        page.click("#analysis-start")
        page.wait_for_selector("#analysis-result.ok")

        page.wait_for_selector('#analyzer[data-state="DONE"]', timeout=WAIT_MS)
        page.wait_for_selector('#analysis-chart[data-points="4"] .main-svg')
        # a line per config, the Pareto front and the recommended point
        assert page.locator("#analysis-chart .scatterlayer .trace").count() == 4
        assert page.inner_text("#analysis-recommendation").startswith("Recommended: batch 8 · delay ")
        assert page.get_attribute("#analysis-recommendation", "data-candidate") in ("0", "1")
        assert "not client traffic" in page.inner_text("#analysis-load-note")
        assert page.locator("#analysis-points tr").count() == 4

        click_confirmed(page, "#analysis-apply")
        page.wait_for_selector("#analysis-result.ok[data-version]", timeout=WAIT_MS)
        number = page.get_attribute("#analysis-result", "data-version")
        assert number == "2"
        page.wait_for_selector(
            f'#version-rows tr[data-version="{number}"][data-state="READY"]', state="attached", timeout=WAIT_MS
        )
        page.wait_for_function(
            f"document.querySelector('#serving-version').textContent.trim() === '{number}'", timeout=WAIT_MS
        )
        page.wait_for_selector(f"#analysis-rows tr[data-state='DONE'] :text('version {number}')")
        page.goto(infera_server.base_url + "/audit/?model=analyzed")
        log = page.inner_text("table.audit")
        for action in ("analysis.start", "analysis.apply", "version.activate"):
            assert action in log
    assert errors == []
