"""The playground in headless Chromium: a text generator's page streams a completion token by token, with the time
to the first token and the rate; other models have no playground."""

from __future__ import annotations

import pytest

from tests.conftest import ServerProcess, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000


def test_it_streams_a_completion_into_the_page(generator_server: ServerProcess, page):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, generator_server)
    page.goto(generator_server.base_url + "/models/text_echo/")
    page.fill("#playground-prompt", "hello there")
    page.fill("#playground-max-tokens", "100")
    page.fill("#playground-temperature", "0")
    page.click("#playground-generate")
    page.wait_for_function(
        "document.querySelector('#playground-status').textContent.startsWith('Done')", timeout=WAIT_MS
    )
    assert page.inner_text("#playground-output") == "echo: hello there"
    status = page.inner_text("#playground-status")
    assert "time to first token" in status and "17 tokens" in status and "tokens/s" in status
    assert page.get_attribute("#playground", "data-tokens") == "17"
    assert not page.is_disabled("#playground-generate") and page.is_disabled("#playground-stop")
    assert errors == []


def test_a_model_that_does_not_generate_text_has_no_playground(generator_server: ServerProcess, page):
    sign_in(page, generator_server)
    page.goto(generator_server.base_url + "/models/repeat/")
    page.wait_for_selector("#try-form")
    assert page.locator("#playground").count() == 0
