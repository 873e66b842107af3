"""/monitoring/ in headless Chromium with a generator under load: its tokens per second, time to first response and
streams in flight appear in their own charts, which stay hidden while no decoupled model serves."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from tests.conftest import ServerProcess
from tests.console.monitoring.test_browser_monitoring import TRACE, WAIT_MS, open_monitoring

pytestmark = [pytest.mark.browser, pytest.mark.server]


def complete(server: ServerProcess) -> None:
    body = json.dumps({"model": "text_echo", "prompt": "monitored", "max_tokens": 40}).encode()
    request = urllib.request.Request(
        server.base_url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["choices"][0]["text"] == "echo: monitored"


def test_it_charts_a_generator_under_load(generator_server: ServerProcess, page):
    errors = open_monitoring(page, generator_server, "?model=text_echo")
    stop = threading.Event()
    failures: list[BaseException] = []

    def load() -> None:
        while not stop.is_set():
            try:
                complete(generator_server)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)
                return

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        page.wait_for_function(f"({TRACE})(['chart-tokens', 'text_echo']).peak > 0", timeout=WAIT_MS)
        page.wait_for_function(f"({TRACE})(['chart-first-response', 'text_echo to first']).peak > 0", timeout=WAIT_MS)
        page.wait_for_function(f"({TRACE})(['chart-streams', 'text_echo']).points >= 1", timeout=WAIT_MS)
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not failures, failures
    assert page.locator(".generation-card[hidden]").count() == 0
    assert errors == []
