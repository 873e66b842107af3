"""/metrics: Triton's names, labels and types, parsed back by prometheus_client, counting exactly what was sent."""

from __future__ import annotations

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.errors import BackendError
from engine.monitoring.devices import DeviceSampler
from engine.monitoring.prometheus import CONTENT_TYPE, MetricsApp, check_families
from engine.monitoring.sampler import MetricsSampler
from engine.serving.server import InferenceServer
from tests.engine.monitoring.doubling_model import doubler_request, write_doubler

MODEL_COUNTERS = (
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
)


@pytest.fixture
async def server(tmp_path):
    server = InferenceServer(write_doubler(tmp_path))
    await server.start()
    yield server
    await server.stop()


async def get(app: MetricsApp, path: str = "/metrics", method: str = "GET") -> tuple[int, dict[bytes, bytes], str]:
    messages: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        messages.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    start, body = messages
    return start["status"], dict(start["headers"]), body["body"].decode()


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def value(family, **labels: str) -> float:
    (sample,) = [s for s in family.samples if s.labels == labels]
    return sample.value


async def test_it_writes_tritons_counter_names_without_a_total_suffix(server):
    status, headers, text = await get(MetricsApp(server))
    assert status == 200
    assert headers[b"content-type"].decode() == CONTENT_TYPE
    for name in MODEL_COUNTERS:
        assert f"# TYPE {name} counter\n" in text
        assert f'\n{name}{{model="doubler",version="1"}} 0\n' in text
    assert "_total{" not in text and "_total " not in text
    assert "# TYPE nv_inference_pending_request_count gauge\n" in text


async def test_it_moves_the_counters_by_exactly_the_requests_sent(server):
    app = MetricsApp(server)
    before = families((await get(app))[2])
    for _ in range(5):
        await server.infer(doubler_request(1.0, batch=3))
    for _ in range(2):
        with pytest.raises(BackendError):
            await server.infer(doubler_request(-1.0))
    after = families((await get(app))[2])
    labels = {"model": "doubler", "version": "1"}

    def moved(name: str) -> float:
        return value(after[name], **labels) - value(before[name], **labels)

    assert moved("nv_inference_request_success") == 5
    assert moved("nv_inference_request_failure") == 2
    assert moved("nv_inference_count") == 15  # failed executions count as failures only, as in Triton
    assert moved("nv_inference_exec_count") == 5
    assert moved("nv_inference_request_duration_us") > 0
    assert value(after["nv_inference_pending_request_count"], **labels) == 0
    for name in MODEL_COUNTERS:
        assert after[name].type == "counter"


async def test_it_reports_the_cpu_and_no_gpu_series_on_a_machine_without_one(server):
    sampler = MetricsSampler(server, devices=DeviceSampler(use_nvml=False))
    sampler.sample()
    parsed = families((await get(MetricsApp(server, sampler)))[2])
    assert 0.0 <= parsed["nv_cpu_utilization"].samples[0].value <= 1.0
    assert parsed["nv_cpu_memory_used_bytes"].samples[0].value > 0
    assert parsed["nv_cpu_memory_total_bytes"].samples[0].value > 0
    for name in ("nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage"):
        assert parsed[name].type == "gauge"
        assert parsed[name].samples == []


async def test_it_answers_only_get_on_its_path_and_hands_the_rest_on(server):
    seen: list[str] = []

    async def fallback(scope, receive, send) -> None:
        seen.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = MetricsApp(server, fallback=fallback)
    assert (await get(app, method="POST"))[0] == 405
    assert (await get(app, path="/v2/health/live"))[0] == 204
    assert seen == ["/v2/health/live"]
    assert (await get(MetricsApp(server), path="/elsewhere"))[0] == 404


async def test_it_names_the_replica_in_an_info_metric_and_keeps_tritons_labels(server):
    _, _, text = await get(MetricsApp(server, replica="replica-2"))
    found = families(text)
    assert found["infera_replica_info"].type == "gauge"
    assert value(found["infera_replica_info"], replica="replica-2") == 1
    assert all(set(s.labels) == {"model", "version"} for s in found["nv_inference_count"].samples)


async def test_it_answers_every_workers_series_labelled_and_the_hosts_devices_once(server):
    await server.infer(doubler_request(1.0, batch=2))
    app = MetricsApp(server, replica="host", workers=lambda: workers)
    own = app.collector.families_data()
    other = [
        [name, kind, help_text, [[s, {**labels}, v * 10] for s, labels, v in samples]]
        for name, kind, help_text, samples in own
    ]
    workers = [("host-w0", own), ("host-w1", other)]
    _, _, text = await get(app)
    found = families(text)
    count = found["nv_inference_count"]
    assert value(count, model="doubler", version="1", worker="host-w0") == 2
    assert value(count, model="doubler", version="1", worker="host-w1") == 20
    assert sum(s.value for s in count.samples) == 22  # what sum by (model) shows: the replica's total
    assert [s.labels for s in found["nv_cpu_utilization"].samples] == [{}]  # the host's, not a worker's
    assert text.count("# TYPE nv_inference_count counter") == 1


async def test_it_checks_another_workers_families_before_answering_with_them(server):
    await server.infer(doubler_request(1.0, batch=2))
    own = orjson.loads(orjson.dumps(MetricsApp(server).collector.families_data()))  # as they travel
    assert check_families(own) == own
    sample = ["nv_inference_count", {"model": "doubler"}, 2]
    for bad in [
        {"nv_inference_count": []},
        [["nv inference count", "counter", "", []]],
        [["nv_inference_count", "total", "", []]],
        [["nv_inference_count", "counter", "", [["nv_inference_count\nforged_metric", {}, 1]]]],
        [["nv_inference_count", "counter", "", [["other_metric", {}, 1]]]],
        [["nv_inference_count", "counter", "", [[sample[0], {"model\n": "doubler"}, 2]]]],
        [["nv_inference_count", "counter", "", [[sample[0], {"model": 1}, 2]]]],
        [["nv_inference_count", "counter", "", [[sample[0], sample[1], "2"]]]],
    ]:
        with pytest.raises(ValueError):
            check_families(bad)


async def test_it_answers_with_its_own_engine_until_the_workers_have_published(server):
    app = MetricsApp(server, replica="host", workers=lambda: [])
    _, _, text = await get(app)
    assert all(set(s.labels) == {"model", "version"} for s in families(text)["nv_inference_count"].samples)
