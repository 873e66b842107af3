"""Every console page, in the light and the dark scheme, has no serious or critical accessibility violation as
axe-core (bundled by the axe-playwright-python package, no download) finds them in headless Chromium."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from tests.conftest import ServerProcess, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

PAGES = [
    "/",
    "/models/",
    "/models/?q=no-such-model",
    "/models/simple/",
    "/models/simple/#analyzer",  # its in-process notice and form, in a tab the first screen hides
    "/models/digits_pipeline/",
    "/models/text_generator/",
    "/monitoring/",
    "/monitoring/?model=digits_pipeline",
    "/users/",
    "/tokens/",
    "/audit/",
    "/audit/?action=no.such.action",
    "/accounts/password/",
    "/api/docs/",
]
BLOCKING = {"serious", "critical"}


def violations(page, axe: Axe, where: str) -> list[str]:
    """The serious and critical violations on the page now, one line each."""
    found = axe.run(page).response["violations"]
    return [
        f"{where}: {v['id']} ({v['impact']}) {v['help']} at {[node['target'] for node in v['nodes'][:3]]}"
        for v in found
        if v["impact"] in BLOCKING
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_has_no_serious_violation(chromium_browser, infera_server: ServerProcess, scheme: str):
    context = chromium_browser.new_context(viewport={"width": 1200, "height": 800}, color_scheme=scheme)
    page = context.new_page()
    axe = Axe()
    found: list[str] = []
    try:
        page.goto(infera_server.base_url + "/accounts/login/")
        found += violations(page, axe, f"/accounts/login/ ({scheme})")
        sign_in(page, infera_server)
        for path in PAGES:
            page.goto(infera_server.base_url + path, wait_until="networkidle")
            found += violations(page, axe, f"{path} ({scheme})")
        page.goto(infera_server.base_url + "/users/", wait_until="networkidle")
        page.click("#users tbody a")
        page.wait_for_load_state("networkidle")
        page.wait_for_selector("#usage-chart[data-empty]")  # its token usage chart drawn (empty: it says why)
        found += violations(page, axe, f"a user's page ({scheme})")
    finally:
        context.close()
    assert found == [], "\n".join(found)
