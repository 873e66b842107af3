"""The runtime's heartbeat: this replica's row appears at start, stays live while it beats, and is gone at a clean
stop; the rows of the replica's processes before a switch to workers (or back) are forgotten, not listed as gone."""

from __future__ import annotations

import datetime

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from console.peers.identity import ProcessIdentity
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


async def test_it_forgets_the_replicas_processes_from_before_it_switched_to_workers():
    """`serve` alone, then `serve --workers 2`: the replica's single process is not listed as a gone replica."""
    await sync_to_async(add_gone)("host", "host-w2", "host-w1", "other-host")
    worker = ProcessIdentity.of_worker("host-w0", 0, 2)
    heartbeat = Heartbeat("host-w0", "", interval=60, former=worker.former_name)
    await heartbeat.start()
    try:
        names = await sync_to_async(lambda: list(Replica.objects.values_list("name", flat=True)))()
    finally:
        await heartbeat.stop()
    assert names == ["host-w0", "host-w1", "other-host"]  # a sibling worker and another replica stay


async def test_it_forgets_the_workers_once_the_replica_runs_alone_again():
    await sync_to_async(add_gone)("host-w0", "host-w1", "hostess-w0")
    heartbeat = Heartbeat("host", "", interval=60, former=ProcessIdentity.single("host").former_name)
    await heartbeat.start()
    try:
        names = await sync_to_async(lambda: list(Replica.objects.values_list("name", flat=True)))()
    finally:
        await heartbeat.stop()
    assert names == ["host", "hostess-w0"]


def add_gone(*names: str) -> None:
    """Rows of processes that stopped cleanly a minute ago."""
    past = timezone.now() - datetime.timedelta(minutes=1)
    for name in names:
        Replica.objects.create(name=name, started_at=past, last_seen=past, expires_at=past, stopped_at=past)
