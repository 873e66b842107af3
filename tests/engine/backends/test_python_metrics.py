"""Custom metrics: pb_utils.MetricFamily counters, gauges and histograms on /metrics with their labels."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.engine.backends.python_client import scrape, tensor

pytestmark = pytest.mark.server

LABELS = {"model": "metrics", "instance": "metrics_0_0"}


def sample(families: dict, family: str, name: str, **extra: str) -> float:
    wanted = LABELS | extra
    return next(s.value for s in families[family].samples if s.name == name and s.labels == wanted)


def test_it_exports_the_models_metrics_with_their_labels(python_url):
    client = httpclient.InferenceServerClient(python_url)
    before = scrape(python_url)
    counted = sample(before, "requests_seen", "requests_seen_total")
    for total in (5.0, 50.0):
        x = np.full((1, 4), total / 4, np.float32)
        seen = client.infer("metrics", [tensor("X", x, "FP32")]).as_numpy("Y")
    after = scrape(python_url)
    assert sample(after, "requests_seen", "requests_seen_total") == counted + 2
    assert seen[0, 0] == counted + 2  # Metric.value() read back inside the model
    assert after["requests_seen"].type == "counter" and after["last_input_sum"].type == "gauge"
    assert sample(after, "last_input_sum", "last_input_sum") == 50.0
    buckets = {le: sample(after, "input_sum", "input_sum_bucket", le=le) for le in ("10.0", "100.0", "+Inf")}
    base = sample(before, "input_sum", "input_sum_count")
    assert buckets["100.0"] - buckets["10.0"] >= 1 and sample(after, "input_sum", "input_sum_count") == base + 2


def test_the_servers_own_metrics_stay_beside_them(python_url):
    families = scrape(python_url)
    assert "nv_inference_request_success" in families and "requests_seen" in families
