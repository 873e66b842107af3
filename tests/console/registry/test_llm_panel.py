"""A language model's page carries the live LLM panel (KV-cache usage, running and waiting sequences, prefix-cache
hit rate...), filled from the /ws/metrics/ feed the page already watches; other models' pages have none; the
consumer's snapshots carry the numbers the panel reads."""

from __future__ import annotations

import orjson
import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model

from console.accounts.roles import set_role
from console.monitoring.consumers import MetricsConsumer
from console.monitoring.live import GroupPublisher
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.runtime_of import RUNTIME_KEY
from engine.llm.metrics import LLMMetrics
from tests.console.accounts.conftest import signed_in
from tests.console.monitoring.conftest import SampledServer
from tests.engine.monitoring.stand_ins import Served, llm

PANEL_FIELDS = ("llm.kv_cache_usage", "llm.running", "llm.waiting", "llm.prefix_cache_hit_rate")


def register(name: str, backend: str) -> None:
    model = RegisteredModel.objects.create(name=name)
    version = ModelVersion.objects.create(
        model=model, number=1, state=VersionState.READY, config={"name": name, "backend": backend}
    )
    model.active_version = version
    model.save()


def a_viewer():
    user = get_user_model().objects.create_user("llm-viewer", password="pw-for-tests-123")
    set_role(user, "viewer")
    return user


@pytest.mark.django_db
def test_it_shows_the_live_panel_on_a_language_models_page(viewer):
    register("tiny", "llm")
    html = signed_in(viewer).get("/models/tiny/").content.decode()
    assert 'id="llm-metrics"' in html
    for field in PANEL_FIELDS:
        assert f'data-live-model="tiny" data-live-field="{field}"' in html
    assert "monitoring/live.js" in html  # the page's own feed fills it


@pytest.mark.django_db
def test_other_models_pages_have_no_llm_panel(viewer):
    register("simple", "onnxruntime")
    html = signed_in(viewer).get("/models/simple/").content.decode()
    assert 'id="llm-metrics"' not in html and "llm.running" not in html


@pytest.mark.django_db(transaction=True)
async def test_the_consumers_snapshots_carry_what_the_panel_reads(in_memory_layer):
    reading = LLMMetrics(running=2, waiting=1, kv_blocks=100, kv_blocks_used=25, prefix_queries=40, prefix_hits=10)
    sampled = SampledServer(llm("tiny", reading), Served("simple", 1))
    sampled.tick()
    sampled.sampler.subscribe(GroupPublisher())
    communicator = WebsocketCommunicator(MetricsConsumer.as_asgi(), "/ws/metrics/?window=0&model=tiny")
    communicator.scope["user"] = await database_sync_to_async(a_viewer)()
    communicator.scope[RUNTIME_KEY] = sampled.runtime
    assert (await communicator.connect())[0]
    try:
        assert orjson.loads(await communicator.receive_from(timeout=5))["type"] == "backlog"
        await sampled.sampler.publish(sampled.tick())
        message = orjson.loads(await communicator.receive_from(timeout=5))
        (entry,) = message["snapshot"]["models"]
        assert entry["name"] == "tiny"
        llm_numbers = entry["llm"]
        assert (llm_numbers["running"], llm_numbers["waiting"]) == (2, 1)
        assert llm_numbers["kv_cache_usage"] == 0.25 and llm_numbers["prefix_cache_hit_rate"] == 0.25
    finally:
        await communicator.disconnect()
