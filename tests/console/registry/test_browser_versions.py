"""In headless Chromium against a real server: upload a new digits version, watch it load, switch to it, roll back."""

from __future__ import annotations

import base64
import re

import pytest

from tests.conftest import ServerProcess, engine_front_end_missing, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 90_000  # a load on two busy cores; the page itself refreshes every 2 s

DROP_FILE = """([name, encoded]) => {
  const bytes = Uint8Array.from(atob(encoded), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name));
  const zone = document.querySelector("#dropzone");
  zone.dispatchEvent(new DragEvent("dragover", { dataTransfer: transfer, bubbles: true, cancelable: true }));
  zone.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
}"""


def click_confirmed(page, selector: str) -> None:
    page.once("dialog", lambda dialog: dialog.accept())
    page.click(selector)


def served_by_try_it(page) -> str:
    """Send the request "try it" builds from the metadata; the model_version that answered."""
    page.select_option("#try-version", "")
    page.click("#try-build")
    page.wait_for_function("document.querySelector('#try-body').value.includes('image')", timeout=WAIT_MS)
    page.click("#try-send")
    page.wait_for_function("document.querySelector('#try-status').dataset.modelVersion", timeout=WAIT_MS)
    return page.eval_on_selector("#try-status", "node => node.dataset.modelVersion")


def test_it_uploads_a_new_version_switches_to_it_and_rolls_back(infera_server: ServerProcess, page):
    if reason := engine_front_end_missing():
        pytest.skip(reason)
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/digits/")
    page.wait_for_selector('#version-rows tr[data-version="2"][data-state="READY"]', timeout=WAIT_MS)
    previous = page.inner_text("#active-version").strip()
    assert previous == "2"
    page.wait_for_function("document.querySelector('#serving-version').textContent.trim() === '2'", timeout=WAIT_MS)

    # drag and drop the file, then upload with a progress bar
    model = (infera_server.var_dir / "models" / "digits" / "1" / "model.onnx").read_bytes()
    page.click("#upload-open")
    page.evaluate(DROP_FILE, ["model.onnx", base64.b64encode(model).decode()])
    assert "model.onnx" in page.inner_text("#chosen-file")
    page.fill("#upload-notes", "uploaded from the browser test")
    page.click("#upload-button")
    page.wait_for_selector("#upload-result.ok", timeout=WAIT_MS)
    assert page.eval_on_selector("#upload-progress", "node => node.value") == 100
    number = re.search(r"Version (\d+) uploaded", page.inner_text("#upload-result")).group(1)
    row = f'#version-rows tr[data-version="{number}"]'

    # it loads by itself and the table follows without a reload
    page.wait_for_selector(f'{row}[data-state="READY"]', timeout=WAIT_MS)
    assert "uploaded from the browser test" in page.inner_text(row)

    click_confirmed(page, f'{row} button[data-action="activate"]')
    page.wait_for_function(
        f"document.querySelector('#serving-version').textContent.trim() === '{number}'", timeout=WAIT_MS
    )
    assert page.inner_text("#active-version").strip() == number
    assert served_by_try_it(page) == number

    # roll back
    click_confirmed(page, f'#version-rows tr[data-version="{previous}"] button[data-action="activate"]')
    page.wait_for_function(
        f"document.querySelector('#serving-version').textContent.trim() === '{previous}'", timeout=WAIT_MS
    )
    assert served_by_try_it(page) == previous

    # leave digits as the session found it
    click_confirmed(page, f'{row} button[data-action="delete"]')
    page.wait_for_selector(row, state="detached", timeout=WAIT_MS)
    page.goto(infera_server.base_url + "/audit/?model=digits")
    log = page.inner_text("table.audit")
    for action in ("version.upload", "version.activate", "version.delete"):
        assert action in log


def test_it_offers_no_retry_for_an_upload_that_never_could_load(infera_server: ServerProcess, page):
    """A garbage file fails its checks and keeps no files: its FAILED row offers Delete, not "Retry load"."""
    sign_in(page, infera_server)
    page.goto(infera_server.base_url + "/models/simple/")
    page.click("#upload-open")
    page.evaluate(DROP_FILE, ["model.onnx", base64.b64encode(b"this is not a protobuf").decode()])
    page.click("#upload-button")
    page.wait_for_selector("#upload-result.bad", timeout=WAIT_MS)
    number = re.search(r"version (\d+) of 'simple' failed", page.inner_text("#upload-result")).group(1)
    row = f'#version-rows tr[data-version="{number}"][data-state="FAILED"]'
    page.wait_for_selector(row, timeout=WAIT_MS)
    actions = page.eval_on_selector_all(f"{row} button[data-action]", "buttons => buttons.map((b) => b.dataset.action)")
    assert actions == ["delete"]

    click_confirmed(page, f'{row} button[data-action="delete"]')  # leave simple as the session found it
    page.wait_for_selector(row, state="detached", timeout=WAIT_MS)
