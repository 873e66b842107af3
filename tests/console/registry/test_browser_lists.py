"""In headless Chromium against a real server: a model's versions sort by a header's button (keyboard too) and filter
as one types; the models list sorts by a header link and filters through its form."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 60_000
FIRST_VERSION = "document.querySelector('#version-rows tr[data-version]')?.dataset.version"


def test_it_sorts_and_filters_a_models_versions_from_the_keyboard(infera_server: ServerProcess, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits/")
    page.wait_for_function("document.querySelectorAll('#version-rows tr[data-version]').length >= 2", timeout=WAIT_MS)
    assert page.evaluate(FIRST_VERSION) == "1"
    page.focus("th[data-sort=number] button")
    page.keyboard.press("Enter")
    page.wait_for_function(f"{FIRST_VERSION} === '2'", timeout=WAIT_MS)
    assert page.get_attribute("th[data-sort=number]", "aria-sort") == "descending"
    assert "versions_sort=-number" in page.url
    page.fill("#version-filter-text", "no note says this")
    page.wait_for_selector("#version-rows tr.empty", timeout=WAIT_MS)
    assert page.text_content("#version-rows") == "No version matches these filters."
    page.fill("#version-filter-text", "")
    page.select_option("#version-filter-state", "READY")
    page.wait_for_function("document.querySelectorAll('#version-rows tr[data-version]').length >= 2", timeout=WAIT_MS)
    page.reload()  # the sort and the filters live in the URL
    page.wait_for_function(f"{FIRST_VERSION} === '2'", timeout=WAIT_MS)
    assert page.input_value("#version-filter-state") == "READY"
    assert errors == []


def test_it_sorts_and_filters_the_models_list(infera_server: ServerProcess, page):
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/")
    page.click("thead a.sort:has-text('Model')")  # sorted by name already: the second click turns it around
    page.wait_for_url("**/models/?sort=-name")
    names = page.eval_on_selector_all("#model-rows tr[data-model]", "rows => rows.map((r) => r.dataset.model)")
    assert names == sorted(names, reverse=True) and "simple" in names
    page.fill("#id_q", "digits")
    page.press("#id_q", "Enter")
    page.wait_for_url("**/models/?q=digits*")
    names = page.eval_on_selector_all("#model-rows tr[data-model]", "rows => rows.map((r) => r.dataset.model)")
    assert names and all("digits" in name for name in names)
    assert names == sorted(names, reverse=True)
