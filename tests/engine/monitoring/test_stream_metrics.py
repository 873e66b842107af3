"""/metrics for decoupled models: Triton's first-response histogram and Infera's stream counters, read back with
prometheus_client's own parser."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.monitoring.prometheus import EngineCollector, render_metrics
from engine.serving.server import InferenceServer
from engine.settings import EngineSettings
from engine.types import InferenceRequest
from tests.engine.decoupled_models import build_decoupled_repository


@pytest.fixture
async def server(tmp_path):
    engine = InferenceServer(build_decoupled_repository(tmp_path / "repo"), gpu_count=0, settings=EngineSettings())
    await engine.start(load_models=True)
    try:
        yield engine
    finally:
        await engine.stop()


def samples(server: InferenceServer) -> dict[tuple[str, tuple], float]:
    text = render_metrics(EngineCollector(server)).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_it_exports_first_response_times_and_stream_counts(server):
    for values in ([1, 2, 3], [4], []):
        stream = await server.infer_stream(InferenceRequest("repeat", {"IN": np.array(values, dtype=np.int32)}))
        _ = [response async for response in stream]
    found = samples(server)
    labels = (("model", "repeat"), ("version", "1"))
    # the stream without a response has no first response: two of three are in the histogram
    assert found[("nv_inference_first_response_histogram_ms_count", labels)] == 2
    assert found[("nv_inference_first_response_histogram_ms_bucket", (("le", "+Inf"), *labels))] == 2
    assert found[("nv_inference_first_response_histogram_ms_sum", labels)] > 0
    assert found[("infera_stream_responses_total", labels)] == 4
    assert found[("infera_stream_inter_response_count_total", labels)] == 2
    assert found[("infera_streams_in_flight", labels)] == 0
    assert not any(name.startswith("infera_stream") and dict(key).get("model") == "simple" for name, key in found)


async def test_the_sampler_reports_streams_per_interval(server):
    from engine.monitoring.sampler import MetricsSampler
    from tests.engine.monitoring.stand_ins import FIXED_DEVICES

    now = [100.0]
    sampler = MetricsSampler(server, clock=lambda: now[0], wall_clock=lambda: now[0])
    sampler.sample(devices=FIXED_DEVICES)
    for values in ([1, 2, 3], [4]):
        stream = await server.infer_stream(InferenceRequest("repeat", {"IN": np.array(values, dtype=np.int32)}))
        _ = [response async for response in stream]
    now[0] += 2.0
    snapshot = sampler.sample(devices=FIXED_DEVICES)
    entry = next(m for m in snapshot["models"] if m["name"] == "repeat")
    assert entry["streams"]["responses_per_s"] == 2.0 and entry["streams"]["in_flight"] == 0
    assert entry["streams"]["first_response_ms"] > 0 and entry["streams"]["between_responses_ms"] is not None
