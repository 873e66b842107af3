"""In headless Chromium at 1400 px wide against a real server: a model's page opens on its Overview, whose first
screen (serving state, versions, Try it) is under 1,200 px tall for every seeded model; Try it's default answers
200 on the models the lighter server of test_browser_try_it.py does not seed (the sentence encoder); each tab has its
own address (#config opens the config); the upload of a new version is one click away."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in
from tests.console.registry.test_browser_try_it import TRIED, try_default

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 120_000
FIRST_SCREEN_PX = 1200


@pytest.fixture(scope="module")
def infera_server(infera_full_server: ServerProcess) -> ServerProcess:
    """The session's server with every demo model: every model page is measured, smollm2's and the encoder's."""
    return infera_full_server


@pytest.fixture
def wide_page(chromium_browser):
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900}, bypass_csp=True)
    try:
        yield context.new_page()
    finally:
        context.close()


def listed_models(page, server: ServerProcess) -> list[str]:
    """The names on the models list, signed in as the admin."""
    sign_in(page, server)
    page.goto(server.base_url + "/models/")
    return page.eval_on_selector_all("#model-rows tr[data-model]", "rows => rows.map(row => row.dataset.model)")


def test_it_keeps_every_model_pages_first_screen_short(infera_server: ServerProcess, wide_page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    page = wide_page
    names = listed_models(page, infera_server)
    assert len(names) >= 10
    tall = {}
    for name in names:
        page.goto(f"{infera_server.base_url}/models/{name}/")
        page.wait_for_function("document.querySelector('#serving-version').textContent.trim() !== '–'", timeout=WAIT_MS)
        if page.query_selector("#try-form"):
            page.wait_for_selector("#try-form[data-ready=true]", timeout=WAIT_MS)
        height = page.evaluate("document.documentElement.scrollHeight")
        if height >= FIRST_SCREEN_PX:
            tall[name] = height
    assert tall == {}


def test_it_answers_200_to_try_it_on_the_models_only_the_full_server_seeds(infera_server: ServerProcess, wide_page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    page = wide_page
    names = listed_models(page, infera_server)
    answers = {}
    for name in sorted(set(names) - TRIED):
        page.goto(f"{infera_server.base_url}/models/{name}/")
        if page.query_selector("#try-form"):  # generative models have a playground instead
            answers[name] = try_default(page, infera_server, name)[0]
    assert answers == {"all-minilm-l6-v2": "200"}


def test_it_opens_the_tab_its_address_names_and_remembers_a_click(infera_server: ServerProcess, page):
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/simple/#config")
    page.wait_for_selector("#config-editor", state="visible")
    assert page.get_attribute("#tab-config", "aria-selected") == "true"
    assert page.is_hidden("#panel-overview")

    page.click("#tab-traffic")
    assert page.evaluate("window.location.hash") == "#traffic"
    assert page.is_visible("#panel-traffic") and page.is_hidden("#panel-config")
    page.reload()
    assert page.is_visible("#panel-traffic")

    page.press("#tab-traffic", "ArrowLeft")
    assert page.is_visible("#panel-overview") and page.evaluate("window.location.hash") == ""


def test_it_opens_the_upload_form_in_one_click(infera_server: ServerProcess, page):
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits/#analyzer")
    assert page.is_hidden("#upload-file")
    page.click("#upload-open")
    assert page.is_visible("#upload-file") and page.is_visible("#panel-overview")
