"""The wiring: start_monitoring starts one sampler whose snapshots reach dashboards; /metrics over the same sampler."""

from __future__ import annotations

import os

import orjson
import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from prometheus_client.parser import text_string_to_metric_families

from console import engine_link
from console.monitoring import live
from console.monitoring.consumers import MetricsConsumer
from engine.server import InferenceServer
from tests.engine.monitoring.doubling_model import doubler_request, write_doubler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def server(tmp_path, in_memory_layer):
    server = InferenceServer(write_doubler(tmp_path))
    await server.start()
    yield server
    await live.stop_monitoring()
    live.set_sampler(None)
    await server.stop()


async def test_it_streams_the_running_samplers_snapshots_to_a_dashboard(server, user_with_role):
    await server.infer(doubler_request(1.0))
    communicator = WebsocketCommunicator(MetricsConsumer.as_asgi(), "/ws/metrics/?window=0")
    communicator.scope["user"] = await user_with_role("viewer")
    assert (await communicator.connect())[0]
    try:
        assert orjson.loads(await communicator.receive_from(timeout=5))["snapshots"] == []
        (task,) = live.start_monitoring(server)
        assert live.start_monitoring(server) == [task]
        publishers = [s for s in live.current_sampler().subscribers if isinstance(s, live.GroupPublisher)]
        assert len(publishers) == 1
        message = orjson.loads(await communicator.receive_from(timeout=10))
        assert message["type"] == "snapshot"
        assert [m["name"] for m in message["snapshot"]["models"]] == ["doubler"]
    finally:
        await communicator.disconnect()
    await live.stop_monitoring()
    assert task.done()


async def test_it_answers_metrics_and_passes_other_paths_on(server):
    forwarded: list[str] = []

    async def v2(scope, receive, send) -> None:
        forwarded.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app = live.metrics_app(server, fallback=v2)
    assert app.collector.sampler is live.current_sampler()
    await server.infer(doubler_request(2.0, batch=2))
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "path": "/metrics", "headers": []}, receive, send)
    families = {f.name: f for f in text_string_to_metric_families(sent[1]["body"].decode())}
    assert families["nv_inference_count"].samples[0].value == 2
    await app({"type": "http", "method": "GET", "path": "/v2/models", "headers": []}, receive, send)
    assert forwarded == ["/v2/models"]


def test_it_starts_monitoring_when_the_engine_has_started():
    assert live.start_monitoring_hook in engine_link.started_hooks()


def test_it_streams_each_replicas_own_numbers_over_a_shared_layer(settings):
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    assert live.group_name() == "metrics"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:9"]}}
    }
    name = live.group_name()
    assert name.startswith("metrics.") and name.endswith(f".{os.getpid()}")
    assert get_channel_layer().require_valid_group_name(name)
