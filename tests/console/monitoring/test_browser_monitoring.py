"""The monitoring page in headless Chromium against a real server: live charts growing under load, reconnection,
live numbers on other pages, and a machine without NVML."""

from __future__ import annotations

import urllib.request

import orjson
import pytest

from tests.conftest import ARTIFACTS, ServerProcess, sign_in
from tests.console.monitoring.conftest import steady_load

pytestmark = [pytest.mark.browser, pytest.mark.server]

WAIT_MS = 30_000

# points and largest value of the named trace of a chart (-1 when the trace is not there yet)
TRACE = """([chart, name]) => {
  const trace = (document.getElementById(chart).data || []).find((t) => t.name === name);
  if (!trace) return { points: -1, peak: 0 };
  return { points: trace.x.length, peak: Math.max(0, ...trace.y.filter((y) => y !== null)) };
}"""


def open_monitoring(page, server: ServerProcess, query: str = "") -> list[str]:
    """Sign in, open /monitoring/ (with `query`, "?model=..."), wait for the stream; returns the page's script errors
    as they come."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    sign_in(page, server)
    page.goto(server.base_url + "/monitoring/" + query)
    page.wait_for_function("document.getElementById('connection-state').dataset.state === 'live'", timeout=WAIT_MS)
    return errors


def test_it_extends_the_throughput_trace_as_load_arrives(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    page.wait_for_function(f"({TRACE})(['chart-throughput', 'simple']).points >= 1", timeout=WAIT_MS)
    before = page.evaluate(TRACE, ["chart-throughput", "simple"])
    # keep the trace objects: extendTraces grows them in place, a redraw would replace them
    page.evaluate("window.__traces = document.getElementById('chart-throughput').data.slice()")
    with steady_load(monitoring_server) as sent:
        page.wait_for_function(
            f"({TRACE})(['chart-throughput', 'simple']).peak > 0"
            f" && ({TRACE})(['chart-latency', 'simple p99']).peak > 0",
            timeout=WAIT_MS,
        )
        page.wait_for_function(
            f"({TRACE})(['chart-throughput', 'simple']).points >= {before['points'] + 3}", timeout=WAIT_MS
        )
        assert sent[0] > 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "monitoring.png"), full_page=True)
    after = page.evaluate(TRACE, ["chart-throughput", "simple"])
    assert after["points"] > before["points"]
    assert page.evaluate("window.__traces.every((t, i) => document.getElementById('chart-throughput').data[i] === t)")
    assert page.locator("#model-select option[value=simple]").count() == 1
    assert errors == []


def test_it_charts_live_sequences(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    body = orjson.dumps(
        {
            "parameters": {"sequence_id": 4711, "sequence_start": True},
            "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [3]}],
        }
    )
    request = urllib.request.Request(
        monitoring_server.base_url + "/v2/models/simple_sequence_onnx/infer", data=body, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    # the sequence stays live (no END) until it idles out after five seconds
    page.wait_for_function(f"({TRACE})(['chart-sequences', 'simple_sequence_onnx live']).peak >= 1", timeout=WAIT_MS)
    assert errors == []


def test_it_narrows_to_one_model_and_changes_the_window(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    page.wait_for_function(f"({TRACE})(['chart-pending', 'simple']).points >= 1", timeout=WAIT_MS)
    page.select_option("#model-select", "simple")
    page.wait_for_url("**/monitoring/?model=simple")
    page.select_option("#window-select", "60")
    page.wait_for_function(f"({TRACE})(['chart-pending', 'simple']).points >= 1", timeout=WAIT_MS)
    assert page.evaluate(f"({TRACE})(['chart-pending', 'simple']).points") <= 60
    assert errors == []


def test_it_splits_the_model_charts_by_version(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    page.wait_for_function(f"({TRACE})(['chart-throughput', 'simple']).points >= 1", timeout=WAIT_MS)
    page.check("#split-versions")
    page.wait_for_url("**/monitoring/?split=versions")
    page.wait_for_function(f"({TRACE})(['chart-throughput', 'simple v1']).points >= 1", timeout=WAIT_MS)
    page.wait_for_function(f"({TRACE})(['chart-latency', 'simple v1 p99']).points >= 1", timeout=WAIT_MS)
    assert page.evaluate(f"({TRACE})(['chart-throughput', 'simple']).points") == -1  # rebuilt, not merged
    page.uncheck("#split-versions")
    page.wait_for_function(f"({TRACE})(['chart-throughput', 'simple']).points >= 1", timeout=WAIT_MS)
    assert errors == []


def test_it_shows_the_connection_state_and_reconnects_by_itself(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    page.evaluate(
        """() => {
          window.__states = [];
          const label = document.getElementById('connection-state');
          new MutationObserver(() => window.__states.push(label.dataset.state))
            .observe(label, { attributes: true, attributeFilter: ['data-state'] });
          window.inferaMonitoring.socket.socket.close();
        }"""
    )
    page.wait_for_function("window.__states.includes('reconnecting')", timeout=WAIT_MS)
    page.wait_for_function("window.__states.at(-1) === 'live'", timeout=WAIT_MS)
    page.wait_for_function("Number(document.getElementById('monitoring').dataset.points) >= 1", timeout=WAIT_MS)
    assert errors == []


def test_it_fills_live_numbers_on_other_pages(monitoring_server: ServerProcess, page):
    sign_in(page, monitoring_server)
    page.goto(monitoring_server.base_url + "/tokens/")  # a page without a metrics socket of its own
    page.evaluate(
        """() => {
          const number = document.createElement('span');
          number.id = 'live-number';
          number.dataset.liveModel = 'simple';
          number.dataset.liveField = 'success_per_s';
          document.querySelector('main').append(number);
          const script = document.createElement('script');
          script.src = '/static/monitoring/live.js';
          document.head.append(script);
        }"""
    )
    with steady_load(monitoring_server):
        page.wait_for_function(
            "(() => { const n = document.getElementById('live-number');"
            " return n.dataset.liveState === 'live' && /^[1-9][0-9.]*\\/s$/.test(n.textContent); })()",
            timeout=WAIT_MS,
        )


def test_it_shows_cpu_and_memory_when_nvml_is_absent(monitoring_server: ServerProcess, page):
    errors = open_monitoring(page, monitoring_server)
    page.wait_for_function(f"({TRACE})(['chart-devices', 'CPU utilization %']).points >= 1", timeout=WAIT_MS)
    assert page.locator("#no-gpu-note").is_visible()
    assert "No GPU on this machine" in page.locator("#no-gpu-note").inner_text()
    assert page.locator("#device-title").inner_text() == "CPU utilization and process memory"
    assert page.evaluate(f"({TRACE})(['chart-devices', 'process memory MiB']).peak") > 0
    assert "GPU monitoring is off" in monitoring_server.log()
    assert "Traceback" not in monitoring_server.log()
    assert errors == []


def test_it_splits_the_requests_between_http_and_grpc(monitoring_server: ServerProcess, page):
    import threading

    import numpy as np
    import tritonclient.grpc as grpcclient

    errors = open_monitoring(page, monitoring_server)
    stop = threading.Event()

    def grpc_load() -> None:
        client = grpcclient.InferenceServerClient(monitoring_server.grpc_address)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            infer_input = grpcclient.InferInput(name, [1, 16], "INT32")
            infer_input.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
            inputs.append(infer_input)
        try:
            while not stop.is_set():
                client.infer("simple", inputs)
        finally:
            client.close()

    worker = threading.Thread(target=grpc_load, daemon=True)
    worker.start()
    try:
        with steady_load(monitoring_server):
            page.wait_for_function(
                f"({TRACE})(['chart-protocols', 'GRPC']).peak > 0 && ({TRACE})(['chart-protocols', 'HTTP']).peak > 0",
                timeout=WAIT_MS,
            )
    finally:
        stop.set()
        worker.join(timeout=30)
    assert errors == []
