"""The wiring: the runtime's one sampler feeds dashboards through the group publisher and /metrics."""

from __future__ import annotations

import os

import orjson
import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from prometheus_client.parser import text_string_to_metric_families

from console.hosting.runtime import Runtime
from console.monitoring import live
from console.monitoring.consumers import MetricsConsumer
from console.runtime_of import RUNTIME_KEY
from tests.engine.monitoring.doubling_model import doubler_request, write_doubler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def runtime(tmp_path, settings, in_memory_layer):
    runtime = Runtime(settings.INFERA.replace(model_store=write_doubler(tmp_path), disable_nvml=True))
    await runtime.server.start()
    yield runtime
    await runtime.sampler.stop()
    await runtime.server.stop()


async def test_it_streams_the_runtimes_snapshots_to_a_dashboard(runtime, user_with_role):
    await runtime.server.infer(doubler_request(1.0))
    communicator = WebsocketCommunicator(MetricsConsumer.as_asgi(), "/ws/metrics/?window=0")
    communicator.scope["user"] = await user_with_role("viewer")
    communicator.scope[RUNTIME_KEY] = runtime
    assert (await communicator.connect())[0]
    try:
        assert orjson.loads(await communicator.receive_from(timeout=5))["snapshots"] == []
        runtime.sampler.subscribe(live.GroupPublisher())
        task = runtime.sampler.start()
        message = orjson.loads(await communicator.receive_from(timeout=10))
        assert message["type"] == "snapshot"
        assert [m["name"] for m in message["snapshot"]["models"]] == ["doubler"]
    finally:
        await communicator.disconnect()
    await runtime.sampler.stop()
    assert task.done()


async def test_it_answers_metrics_and_passes_other_paths_to_v2(runtime):
    app = runtime.engine_app
    assert app.collector.sampler is runtime.sampler
    await runtime.server.infer(doubler_request(2.0, batch=2))
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": "/metrics", "headers": []}, receive, send)
    families = {f.name: f for f in text_string_to_metric_families(sent[1]["body"].decode())}
    assert families["nv_inference_count"].samples[0].value == 2
    sent.clear()
    await app({"type": "http", "method": "GET", "path": "/v2/health/live", "headers": []}, receive, send)
    assert sent[0]["status"] == 200


def test_it_streams_each_replicas_own_numbers_over_a_shared_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert live.group_name() == "process.metrics"  # never sent on to a host's other workers
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:9"]}}
    }
    name = live.group_name()
    assert name.startswith("process.metrics.") and name.endswith(f".{os.getpid()}")
    assert get_channel_layer().require_valid_group_name(name)
