"""In headless Chromium against a real server: the config editor refuses an invalid edit with the engine's message,
and a form control's valid edit saved as a new version becomes READY and serves."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000  # a trial load and a load on two busy cores; the page polls every 2 s


def api_headers(page) -> dict[str, str]:
    """What a same-origin script sends with a change: the page's CSRF token."""
    return {"X-CSRFToken": page.get_attribute('meta[name="csrf-token"]', "content")}


@contextmanager
def copy_of_simple(page, server: ServerProcess, name: str) -> Iterator[None]:
    """Sign in and register `name` with one version (the demo `simple`'s model file and config) through the REST
    API; delete it at the end, so the session's other tests find the server as it was."""
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, server)
    page.goto(server.base_url + "/models/")
    headers = api_headers(page)
    created = page.request.post(server.base_url + "/api/models/", data={"name": name}, headers=headers)
    assert created.status == 201, created.text()
    store = server.var_dir / "models" / "simple"
    config = (store / "config.pbtxt").read_text().replace('name: "simple"', f'name: "{name}"')
    model = {
        "name": "model.onnx",
        "mimeType": "application/octet-stream",
        "buffer": (store / "1" / "model.onnx").read_bytes(),
    }
    try:
        uploaded = page.request.post(
            f"{server.base_url}/api/models/{name}/versions/",
            multipart={"file": model, "config": config},
            headers=headers,
        )
        assert uploaded.status == 201, uploaded.text()
        yield
    finally:
        page.goto(server.base_url + "/models/")
        deleted = page.request.delete(f"{server.base_url}/api/models/{name}/", headers=api_headers(page))
        assert deleted.status == 204, deleted.text()


def test_it_refuses_an_invalid_edit_and_saves_a_valid_one_as_a_version_that_becomes_ready(
    infera_server: ServerProcess, page
):
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    with copy_of_simple(page, infera_server, "edited"):
        page.goto(infera_server.base_url + "/models/edited/#config")
        page.wait_for_selector(
            '#version-rows tr[data-version="1"][data-state="READY"]', state="attached", timeout=WAIT_MS
        )
        page.wait_for_selector('#config-editor[data-state="ready"]')
        page.wait_for_selector('#config-check[data-valid="true"]')
        text = page.input_value("#config-text")
        assert "max_batch_size: 8" in text

        # an invalid edit: the engine's message, naming the field, and nothing can be saved
        page.fill("#config-text", text.replace("max_batch_size: 8", "max_batch_size: -1"))
        page.wait_for_selector('#config-check[data-valid="false"]')
        assert "max_batch_size must be 0 or more, got -1" in page.inner_text("#config-errors")
        assert page.is_disabled("#config-save-new") and page.is_disabled("#config-apply")

        # a form control writes a valid config into the editor, with its diff
        page.fill("#knob-max-batch-size", "4")
        page.press("#knob-max-batch-size", "Tab")
        page.wait_for_selector('#config-check[data-valid="true"]')
        assert "max_batch_size: 4" in page.input_value("#config-text")
        assert "+max_batch_size: 4" in page.text_content("#config-diff")
        assert page.is_enabled("#config-save-new")

        # the other form: JSON, from the same config
        page.check("#config-format-json")
        page.wait_for_selector('#config-check[data-valid="true"]')
        assert '"max_batch_size": 4' in page.input_value("#config-text")

        page.fill("#config-notes", "smaller batches")
        page.click("#config-save-new")
        page.wait_for_selector("#config-result.ok", timeout=WAIT_MS)
        number = page.get_attribute("#config-result", "data-version")
        assert number == "2"
        page.wait_for_selector(
            f'#version-rows tr[data-version="{number}"][data-state="READY"]', state="attached", timeout=WAIT_MS
        )
        page.wait_for_function(
            f"document.querySelector('#serving-version').textContent.trim() === '{number}'", timeout=WAIT_MS
        )
        assert "smaller batches" in page.text_content(f'#version-rows tr[data-version="{number}"]')
        # the editor now edits the new active version
        page.wait_for_selector(f'#config-editor[data-state="ready"][data-version="{number}"]')
        page.goto(infera_server.base_url + "/audit/?model=edited")
        log = page.inner_text("table.audit")
        for action in ("config.edit", "version.upload", "version.activate"):
            assert action in log
    assert errors == []


HOLD_CHECKS = """() => {
  const real = window.fetch;
  window.heldChecks = [];
  window.holding = true;
  window.fetch = (url, options) =>
    window.holding && String(url).includes("validate")
      ? new Promise((resolve) => window.heldChecks.push(() => resolve(real(url, options))))
      : real(url, options);
}"""
DELAY_WRITTEN = "document.querySelector('#config-text').value.includes('max_queue_delay_microseconds: 500')"


def test_it_keeps_a_queue_delay_typed_while_the_max_batch_size_is_checked(infera_server: ServerProcess, page):
    """The race of issue 39: max batch size set, then the queue delay typed before the engine's check of the first
    came back; that answer wrote the old delay back into the field being typed in, and the delay was lost."""
    with copy_of_simple(page, infera_server, "raced"):
        page.goto(infera_server.base_url + "/models/raced/#config")
        page.wait_for_selector('#config-check[data-valid="true"]', timeout=WAIT_MS)
        page.evaluate(HOLD_CHECKS)
        page.fill("#knob-max-batch-size", "4")
        page.press("#knob-max-batch-size", "Tab")  # its change sends a check, held
        page.wait_for_function("window.heldChecks.length === 1")
        page.fill("#knob-delay", "500")  # typed while the first check is out
        page.evaluate("() => { window.holding = false; window.heldChecks.shift()(); }")
        page.wait_for_selector('#config-editor[data-checking="false"]')
        assert page.input_value("#knob-delay") == "500"
        page.press("#knob-delay", "Tab")
        page.wait_for_function(DELAY_WRITTEN, timeout=WAIT_MS)
        page.wait_for_selector('#config-check[data-valid="true"]')
        assert "max_batch_size: 4" in page.input_value("#config-text")
