"""/ws/metrics/: who may connect, the backlog on connect, one snapshot per sample, narrowing to a model."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from console.hosting.routing import websocket_urlpatterns
from console.monitoring.consumers import MetricsConsumer
from console.monitoring.live import GroupPublisher, group_name
from console.runtime_of import RUNTIME_KEY
from tests.console.layer_stand_ins import LosesOneCancellation, ends_in_time

pytestmark = pytest.mark.django_db(transaction=True)


async def connected(user, path: str = "/ws/metrics/", app=None, sampled=None) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(app or MetricsConsumer.as_asgi(), path)
    communicator.scope["user"] = user
    if sampled is not None:
        communicator.scope[RUNTIME_KEY] = sampled.runtime
    accepted, _ = await communicator.connect()
    assert accepted
    return communicator


async def receive(communicator: WebsocketCommunicator) -> dict:
    return orjson.loads(await communicator.receive_from(timeout=5))


def names(snapshot: dict) -> list[tuple[str, int]]:
    return [(m["name"], m["version"]) for m in snapshot["models"]]


async def test_it_closes_with_4401_for_anonymous_users(sampled):
    communicator = await connected(AnonymousUser(), sampled=sampled)
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    await communicator.disconnect()


async def test_it_closes_with_4403_for_users_without_a_console_role(sampled, user_with_role):
    for user in (await user_with_role("inference"), await user_with_role(None, "no-role")):
        communicator = await connected(user, sampled=sampled)
        assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4403}
        await communicator.disconnect()


async def test_it_sends_the_backlog_then_every_published_snapshot(sampled, user_with_role):
    for _ in range(3):
        sampled.tick()
    sampled.sampler.subscribe(GroupPublisher())
    communicator = await connected(await user_with_role("viewer"), sampled=sampled)
    try:
        backlog = await receive(communicator)
        assert backlog["type"] == "backlog"
        assert backlog["model"] is None and backlog["interval"] == 1.0
        assert [s["t"] for s in backlog["snapshots"]] == [s["t"] for s in sampled.sampler.backlog()]
        await sampled.sampler.publish(sampled.tick())
        live = await receive(communicator)
        assert live["type"] == "snapshot"
        assert live["snapshot"] == orjson.loads(orjson.dumps(sampled.sampler.latest))
        assert names(live["snapshot"]) == [("alpha", 1), ("beta", 1), ("beta", 2)]
    finally:
        await communicator.disconnect()


async def test_it_narrows_the_backlog_and_the_stream_to_one_model(sampled, user_with_role):
    sampled.tick()
    sampled.sampler.subscribe(GroupPublisher())
    communicator = await connected(await user_with_role("operator"), sampled=sampled)
    try:
        await receive(communicator)
        await communicator.send_to(text_data='{"model": "beta"}')
        backlog = await receive(communicator)
        assert backlog["model"] == "beta"
        assert [names(s) for s in backlog["snapshots"]] == [[("beta", 1), ("beta", 2)]]
        await sampled.sampler.publish(sampled.tick())
        assert names((await receive(communicator))["snapshot"]) == [("beta", 1), ("beta", 2)]
        await communicator.send_to(text_data='{"model": null}')
        assert (await receive(communicator))["model"] is None
    finally:
        await communicator.disconnect()


async def test_it_sends_only_the_window_of_backlog_asked_for(sampled, user_with_role):
    for _ in range(10):
        sampled.tick()
    communicator = await connected(await user_with_role("viewer"), "/ws/metrics/?window=3&model=alpha", sampled=sampled)
    try:
        backlog = await receive(communicator)
        assert len(backlog["snapshots"]) == 3 and backlog["window"] == 3
        assert names(backlog["snapshots"][0]) == [("alpha", 1)]
        await communicator.send_to(text_data='{"window": 0}')
        assert (await receive(communicator))["snapshots"] == []
    finally:
        await communicator.disconnect()


async def test_it_adds_the_hour_of_minutes_when_asked_for_history(sampled, user_with_role):
    sampled.clock.now = 600.0  # a minute of the wall clock starts
    for _ in range(61):
        sampled.tick()
    viewer = await user_with_role("viewer")
    plain = await connected(viewer, "/ws/metrics/?window=0", sampled=sampled)
    overview = await connected(viewer, "/ws/metrics/?window=0&history=1", sampled=sampled)
    try:
        assert "minutes" not in await receive(plain)
        backlog = await receive(overview)
        assert [minute["t"] for minute in backlog["minutes"]] == [600_000]
        assert backlog["hour"] == sampled.sampler.history.summary()
    finally:
        await plain.disconnect()
        await overview.disconnect()


async def test_it_answers_an_unreadable_message_and_stays_open(sampled, user_with_role):
    communicator = await connected(await user_with_role("viewer"), sampled=sampled)
    try:
        await receive(communicator)
        for text in ("not json", "[1]", '{"model": 5}', '{"window": "long"}'):
            await communicator.send_to(text_data=text)
            reply = await receive(communicator)
            assert reply["type"] == "error" and reply["error"].startswith("unreadable message")
        await communicator.send_to(text_data="{}")
        assert (await receive(communicator))["type"] == "backlog"
    finally:
        await communicator.disconnect()


async def test_it_feeds_every_dashboard_from_one_sample_and_forgets_closed_ones(sampled, user_with_role):
    sampled.sampler.subscribe(GroupPublisher())
    viewer = await user_with_role("viewer")
    dashboards = [await connected(viewer, sampled=sampled) for _ in range(3)]
    for dashboard in dashboards:
        await receive(dashboard)
    await sampled.sampler.publish(sampled.tick())
    texts = {await dashboard.receive_from(timeout=5) for dashboard in dashboards}
    assert len(texts) == 1  # the same encoded text went to all three
    for dashboard in dashboards:
        await dashboard.disconnect()
    assert not get_channel_layer().groups.get(group_name())


async def test_it_is_routed_at_ws_metrics(sampled, user_with_role):
    communicator = await connected(
        await user_with_role("admin", "boss"), app=URLRouter(websocket_urlpatterns), sampled=sampled
    )
    try:
        assert (await receive(communicator))["type"] == "backlog"
    finally:
        await communicator.disconnect()


async def test_it_sends_an_empty_backlog_before_the_engine_samples(in_memory_layer, user_with_role):
    communicator = await connected(await user_with_role("viewer"))
    try:
        backlog = await receive(communicator)
        assert backlog["snapshots"] == [] and backlog["interval"] is None
    finally:
        await communicator.disconnect()


async def test_it_sends_an_ensemble_with_its_steps_and_their_numbers(ensemble, in_memory_layer, user_with_role):
    await ensemble.infer("pair", 2)
    ensemble.tick()
    ensemble.sampler.subscribe(GroupPublisher())
    communicator = await connected(await user_with_role("viewer"), "/ws/metrics/?model=pair", sampled=ensemble)
    try:
        backlog = await receive(communicator)
        assert backlog["ensembles"] == ["pair"]
        assert [step["model"] for step in backlog["pipeline"]["steps"]] == ["first", "second"]
        assert backlog["snapshots"][-1]["pipeline"]["ensemble"]["success_per_s"] == 2.0
        await ensemble.infer("pair", 1)
        await ensemble.sampler.publish(ensemble.tick())
        live = (await receive(communicator))["snapshot"]
        assert {m["name"] for m in live["models"]} == {"pair", "first", "second"}
        assert [step["success_per_s"] for step in live["pipeline"]["steps"]] == [1.0, 1.0]
        await communicator.send_to(text_data='{"model": "first"}')
        backlog = await receive(communicator)
        assert backlog["pipeline"] is None and "pipeline" not in backlog["snapshots"][-1]
    finally:
        await communicator.disconnect()


async def test_it_ends_its_channel_receive_when_the_socket_closes_though_the_layer_lost_a_cancellation(
    sampled, user_with_role, monkeypatch
):
    layer = LosesOneCancellation()
    monkeypatch.setattr("channels.consumer.get_channel_layer", lambda alias=None: layer)
    communicator = await connected(await user_with_role("viewer"), sampled=sampled)
    assert (await receive(communicator))["type"] == "backlog"
    await layer.receiving.wait()
    await communicator.send_input({"type": "websocket.disconnect", "code": 1000})
    # waited on apart: the communicator's own disconnect() cancels the consumer again after a second
    assert await ends_in_time(asyncio.wait({communicator.future}))
    assert (layer.lost, layer.active) == (1, 0)
