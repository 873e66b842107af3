"""The runtime's heartbeat: this replica's row appears at start, stays live while it beats, and is gone at a clean
stop."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from console.registry.cluster.heartbeat import MAX_INTERVAL_SECONDS, Heartbeat
from console.registry.cluster.models import Replica

pytestmark = pytest.mark.django_db(transaction=True)


def live_names() -> list[str]:
    return list(Replica.objects.live().values_list("name", flat=True))


async def test_it_reports_the_replica_from_its_start_to_its_clean_stop():
    heartbeat = Heartbeat("replica-7", "10.0.0.7:8000", interval=60)
    await heartbeat.start()
    try:
        row = await sync_to_async(Replica.objects.get)(name="replica-7")
        assert row.address == "10.0.0.7:8000" and row.stopped_at is None
        assert await sync_to_async(live_names)() == ["replica-7"]
        first_seen = row.last_seen
        await heartbeat.beat()
        assert (await sync_to_async(Replica.objects.get)(name="replica-7")).last_seen > first_seen
    finally:
        await heartbeat.stop()
    assert await sync_to_async(live_names)() == []
    assert (await sync_to_async(Replica.objects.get)(name="replica-7")).stopped_at is not None


def test_it_beats_at_least_every_few_seconds_whatever_the_reconcile_period():
    assert Heartbeat("r", "", interval=600).interval == MAX_INTERVAL_SECONDS
    assert Heartbeat("r", "", interval=1).interval == 1
