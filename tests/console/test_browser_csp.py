"""Every console page works under its Content-Security-Policy (no inline script, no eval): no violation is reported."""

from __future__ import annotations

import pytest

from tests.conftest import sign_in

pytestmark = pytest.mark.browser

PAGES = [
    "/",
    "/models/",
    "/models/simple/",
    "/models/digits_pipeline/",
    "/monitoring/",
    "/users/",
    "/tokens/",
    "/audit/",
    "/api/docs/",
]


def test_every_page_runs_under_the_policy(chromium_browser, infera_server):
    context = chromium_browser.new_context(viewport={"width": 1200, "height": 800})  # the policy enforced
    page = context.new_page()
    violations: list[str] = []
    page.on(
        "console",
        lambda message: violations.append(message.text) if "Content Security Policy" in message.text else None,
    )
    page.on("pageerror", lambda error: violations.append(str(error)))
    try:
        sign_in(page, infera_server)
        for path in PAGES:
            page.goto(infera_server.base_url + path, wait_until="networkidle")
        page.goto(infera_server.base_url + "/monitoring/")
        page.wait_for_selector("#connection-state[data-state=live]", timeout=30_000)  # charts drew from the socket
        page.wait_for_selector("#chart-throughput.js-plotly-plot", timeout=30_000)  # (the cluster chart is hidden)
    finally:
        context.close()
    assert violations == []
