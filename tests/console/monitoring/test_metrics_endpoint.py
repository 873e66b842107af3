"""/metrics on a real server: Triton's names, parsed by prometheus_client, counters moving by the requests sent."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ServerProcess
from tests.console.monitoring.conftest import infer_simple

pytestmark = pytest.mark.server

LABELS = {"model": "simple", "version": "1"}


def scrape(server: ServerProcess) -> dict:
    status, body = server.get("/metrics")
    assert status == 200
    return {family.name: family for family in text_string_to_metric_families(body.decode())}


def counter(families: dict, name: str) -> float:
    (sample,) = [s for s in families[name].samples if s.labels == LABELS]
    return sample.value


def test_it_counts_exactly_the_requests_sent_to_the_server(monitoring_server: ServerProcess):
    before = scrape(monitoring_server)
    for _ in range(7):
        infer_simple(monitoring_server)
    after = scrape(monitoring_server)
    for name in ("nv_inference_request_success", "nv_inference_count"):
        assert after[name].type == "counter"
        assert counter(after, name) - counter(before, name) == 7
    assert counter(after, "nv_inference_request_failure") == counter(before, "nv_inference_request_failure")
    assert after["nv_gpu_utilization"].samples == []  # NVML is off on this server
    assert 0.0 <= after["nv_cpu_utilization"].samples[0].value <= 1.0
