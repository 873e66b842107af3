"""In headless Chromium against a real (seeded) server: digits' traffic panel, from a slider to a promoted canary."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in
from tests.console.registry.test_browser_versions import click_confirmed

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000  # the seeded models load on two busy cores; the panel polls every 3 s


def serving_version_is(page, number: str) -> None:
    page.wait_for_function(
        f"document.querySelector('#serving-version').textContent.trim() === '{number}'", timeout=WAIT_MS
    )


def test_it_moves_the_slider_saves_a_canary_and_promotes_it(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits/#traffic")
    for number in ("1", "2"):
        page.wait_for_selector(
            f'#version-rows tr[data-version="{number}"][data-state="READY"]', state="attached", timeout=WAIT_MS
        )
    serving_version_is(page, "2")
    page.wait_for_selector('#traffic[data-mode="active"]', timeout=WAIT_MS)
    assert page.is_disabled("#traffic-promote") and page.is_disabled("#traffic-rollback")

    # a canary starts at 90/10 between the active version and the other one; the slider moves the share
    page.select_option("#traffic-mode", "canary")
    assert page.input_value('#traffic-weights input[data-version="2"]') == "90"
    # the thumb divides the bar as the versions share: the active v2's 90% left of it, v1's 10% right of it
    assert page.input_value("#traffic-slider") == "90"
    page.focus("#traffic-slider")
    page.keyboard.press("End")
    for _ in range(30):
        page.keyboard.press("ArrowLeft")  # towards v1's side: v1 gets more
    assert page.input_value('#traffic-weights input[data-version="1"]') == "30"
    assert page.input_value('#traffic-weights input[data-version="2"]') == "70"
    assert page.inner_text("#traffic-slider-left") == "v2 70%"
    assert page.inner_text("#traffic-slider-right") == "v1 30%"

    page.click("#traffic-save")
    page.wait_for_selector("#traffic-result.ok")
    page.wait_for_selector('#traffic[data-in-force="canary"]', timeout=WAIT_MS)  # the reconciler put it in force
    assert page.inner_text("#traffic-summary") == "canary: v1 30% · v2 70%"
    assert page.inner_text("#traffic-in-force") == "In force in this process's engine."
    # the versions side by side, live from the metrics stream, with their part in the policy
    page.wait_for_selector('#traffic-rows tr[data-version="1"] [data-field="role"]:text-is("canary 30%")')
    page.wait_for_selector('#traffic-rows tr[data-version="2"] [data-field="role"]:text-is("active, canary 70%")')
    page.wait_for_selector("#traffic-chart-throughput .main-svg")
    assert page.inner_text("#traffic-promote") == "Promote v1"

    click_confirmed(page, "#traffic-promote")
    page.wait_for_selector('#traffic[data-mode="active"][data-in-force="active"]', timeout=WAIT_MS)
    serving_version_is(page, "1")
    assert page.inner_text("#active-version").strip() == "1"
    assert page.inner_text("#traffic-summary") == "active: every request to the active version"
    page.wait_for_selector('#traffic-rows tr[data-version="1"] [data-field="role"]:text-is("active")')
    assert page.is_disabled("#traffic-rollback")

    # leave digits as the session found it
    page.click("#tab-overview")
    click_confirmed(page, '#version-rows tr[data-version="2"] button[data-action="activate"]')
    serving_version_is(page, "2")
    page.goto(infera_server.base_url + "/audit/?model=digits")
    log = page.inner_text("table.audit")
    for action in ("traffic.set", "traffic.promote", "version.activate"):
        assert action in log
    assert errors == []
