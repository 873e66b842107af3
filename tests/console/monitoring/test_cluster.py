"""The cluster view: other processes' snapshots kept, merged with ours at each sample, narrowed to one replica."""

from __future__ import annotations

import os
from types import SimpleNamespace

import orjson
import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from console.monitoring.cluster import PENDING_MINUTE_SECONDS, ClusterView, cluster_message
from console.monitoring.consumers import MetricsConsumer
from console.monitoring.live import GroupPublisher
from console.peers.identity import ProcessIdentity
from console.runtime_of import RUNTIME_KEY
from engine.monitoring.sampler import MetricsSampler
from tests.engine.monitoring.stand_ins import FIXED_DEVICES, FakeClock, Served, ServedVersions, run_batch

HERE = ProcessIdentity.of_worker("host-w0", 0, 2)
THERE = ProcessIdentity.of_worker("host-w1", 1, 2)


class Process:
    """One serving process's sampler over stand-in versions, on the cluster's shared hand clock."""

    def __init__(self, identity: ProcessIdentity, clock: FakeClock) -> None:
        self.identity = identity
        self.served = Served("simple", 1)
        self.sampler = MetricsSampler(ServedVersions(self.served), clock=clock, wall_clock=lambda: clock.now)
        self.pid = os.getpid() + 1 + (identity.worker or 0)  # another process's

    def serve(self, requests: int) -> None:
        run_batch(self.served.stats, [1.0] * requests)

    def sample(self) -> dict:
        return self.sampler.sample(devices=FIXED_DEVICES)

    def message(self, snapshot: dict, metrics: list | None = None) -> dict:
        message = cluster_message(self.identity, snapshot, metrics)
        return message | {"pid": self.pid}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def here(clock) -> Process:
    return Process(HERE, clock)


@pytest.fixture
def there(clock) -> Process:
    return Process(THERE, clock)


@pytest.fixture
def view(here, clock) -> ClusterView:
    return ClusterView(HERE, here.sampler, enabled=True, clock=clock)


def tick(clock: FakeClock, view: ClusterView, here: Process, *others: Process) -> dict:
    """One second on every process: each samples, the others' snapshots reach us, then ours merges them."""
    clock.advance(1.0)
    for other in others:
        view.add_peer(other.message(other.sample()))
    return view.add_own(here.sample())


def test_it_adds_every_live_process_into_the_cluster_and_lists_each_one(clock, view, here, there):
    tick(clock, view, here, there)
    here.serve(3)
    there.serve(5)
    merged = tick(clock, view, here, there)
    (simple,) = merged["models"]
    assert simple["success_per_s"] == 8.0 and simple["success_count"] == 8
    assert merged["server"]["requests_per_s"] == 8.0
    assert [(r["name"], r["server"]["requests_per_s"]) for r in merged["replicas"]] == [
        ("host-w0", 3.0),
        ("host-w1", 5.0),
    ]
    assert merged["replicas"][1]["devices"] == FIXED_DEVICES.to_dict()
    assert view.backlog(None)[-1] == merged


def test_it_leaves_a_silent_process_out_of_the_totals_and_marks_it_gone(clock, view, here, there):
    tick(clock, view, here, there)
    there.serve(5)
    tick(clock, view, here, there)
    for _ in range(5):
        merged = tick(clock, view, here)  # `there` stopped publishing
    assert [r["name"] for r in merged["replicas"]] == ["host-w0", "host-w1"]  # five intervals: still counted
    merged = tick(clock, view, here)
    assert [r["name"] for r in merged["replicas"]] == ["host-w0"]
    assert merged["models"][0]["success_count"] == 0
    assert view.replicas() == [
        {"name": "host-w0", "replica": "host", "state": "live"},
        {"name": "host-w1", "replica": "host", "state": "gone"},
    ]
    # a restarted process (another pid) starts a history of its own
    there.pid += 100
    tick(clock, view, here, there)
    assert len(view.backlog(None, "host-w1")) == 1


def test_it_narrows_to_one_replicas_own_snapshots(clock, view, here, there):
    for _ in range(3):
        tick(clock, view, here, there)
    ours, theirs = view.backlog(None, "host-w0"), view.backlog(None, "host-w1")
    assert ours == here.sampler.backlog() and len(theirs) == 3
    assert "replicas" not in theirs[-1]
    assert view.since("host-w1", theirs[0]["t"]) == theirs[1:]
    assert view.since("host-w0", ours[-1]["t"]) == []
    assert view.backlog(None, "nobody") == [] and view.since("nobody", 0) == []


def test_it_ignores_its_own_snapshots_coming_back_and_warns_of_a_namesake(clock, view, here, caplog):
    snapshot = here.sample()
    view.add_peer(cluster_message(HERE, snapshot, None))  # ours, back through the layer
    view.add_peer(cluster_message(HERE, snapshot, None) | {"pid": 1})  # another process with our name
    assert view.peers == {}
    assert "also named 'host-w0'" in caplog.text


def test_it_refuses_a_malformed_message_alone_and_merges_the_others(clock, view, here, there):
    good = there.sample()
    model = good["models"][0]
    forged_family = ["nv_inference_count", "counter", "", [["nv_inference_count\nforged 1", {}, 1]]]
    for hostile in [
        there.message(good) | {"name": "host w1\n"},
        there.message(good) | {"replica": "../../etc"},
        there.message(good) | {"pid": "1"},
        there.message(good) | {"text": "not json"},
        there.message(good) | {"text": orjson.dumps(good | {"server": None}).decode()},
        there.message(good) | {"text": orjson.dumps(good | {"models": [model | {"success_per_s": "8"}]}).decode()},
        there.message(good, metrics=[forged_family]),
    ]:
        with pytest.raises(ValueError):
            view.add_peer(hostile)
    assert view.peers == {}
    there.serve(2)
    merged = tick(clock, view, here, there)  # the well-formed go on being merged
    assert [r["name"] for r in merged["replicas"]] == ["host-w0", "host-w1"]
    assert merged["models"][0]["success_count"] == 2


def test_it_waits_for_the_others_to_close_a_minute_before_merging_it(clock, view, here, there):
    clock.now = 60 * 1000 - 2.5  # the minute ends 2.5 s from now
    tick(clock, view, here, there)
    here.serve(2)
    there.serve(4)
    tick(clock, view, here, there)
    clock.advance(1.0)
    closed = view.add_own(here.sample())  # our minute closed; theirs has not reached us yet
    assert "minute" not in closed
    view.add_peer(there.message(there.sample()))
    merged = tick(clock, view, here, there)
    assert merged["minute"]["t"] == 999 * 60_000
    assert merged["minute"]["requests_per_s"] == 6.0 and merged["minute"]["models"]["simple"]["requests_per_s"] == 6.0
    assert view.minutes()[-1] == merged["minute"]


def test_it_does_not_hold_a_minute_back_for_long_for_a_process_that_never_closes_it(clock, view, here, there):
    clock.now = 60 * 1000 + 58.5
    carried = []
    for _ in range(10):
        clock.advance(1.0)
        theirs = there.sample()
        theirs.pop("minute", None)
        view.add_peer(there.message(theirs))
        carried.append("minute" in view.add_own(here.sample()))
    # ours closed at the second sample, and waited PENDING_MINUTE_SECONDS for theirs
    assert carried.index(True) == 1 + PENDING_MINUTE_SECONDS


def test_it_hands_the_metrics_of_this_replicas_live_workers_only(clock, view, here, there):
    elsewhere = Process(ProcessIdentity.single("other-replica"), clock)
    ours, theirs, not_ours = ([[name, "counter", "", []]] for name in ("ours", "theirs", "not_ours"))
    view.own_metrics = ours  # this worker's, as it published them
    view.add_peer(there.message(there.sample(), theirs))
    view.add_peer(elsewhere.message(elsewhere.sample(), not_ours))
    assert view.worker_metrics() == [("host-w0", ours), ("host-w1", theirs)]


@pytest.mark.django_db(transaction=True)
async def test_a_dashboard_sees_the_cluster_then_one_replica_it_asks_for(
    clock, view, here, there, user_with_role, in_memory_layer
):
    publisher = GroupPublisher(get_channel_layer(), cluster=view)
    runtime = SimpleNamespace(sampler=here.sampler, server=None, cluster=view, identity=HERE)
    for _ in range(2):
        clock.advance(1.0)
        view.add_peer(there.message(there.sample()))
        await publisher(here.sample())
    communicator = WebsocketCommunicator(MetricsConsumer.as_asgi(), "/ws/metrics/")
    communicator.scope["user"] = await user_with_role("viewer")
    communicator.scope[RUNTIME_KEY] = runtime
    assert (await communicator.connect())[0]
    try:
        backlog = orjson.loads(await communicator.receive_from(timeout=5))
        assert backlog["process"] == "host-w0" and [r["name"] for r in backlog["replicas"]] == ["host-w0", "host-w1"]
        assert [len(s["replicas"]) for s in backlog["snapshots"]] == [2, 2]
        there.serve(7)
        clock.advance(1.0)
        view.add_peer(there.message(there.sample()))
        await publisher(here.sample())
        live = orjson.loads(await communicator.receive_from(timeout=5))["snapshot"]
        assert live["server"]["requests_per_s"] == 7.0 and len(live["replicas"]) == 2
        await communicator.send_to(text_data=orjson.dumps({"replica": "host-w1"}).decode())
        narrowed = orjson.loads(await communicator.receive_from(timeout=5))
        assert narrowed["replica"] == "host-w1" and len(narrowed["snapshots"]) == 3
        assert all("replicas" not in s for s in narrowed["snapshots"])
        clock.advance(1.0)
        view.add_peer(there.message(there.sample()))
        await publisher(here.sample())
        shown = orjson.loads(await communicator.receive_from(timeout=5))["snapshot"]
        assert shown == view.backlog(None, "host-w1")[-1]
        await communicator.send_to(text_data=orjson.dumps({"replica": 3}).decode())
        assert "'replica' must be" in orjson.loads(await communicator.receive_from(timeout=5))["error"]
    finally:
        await communicator.disconnect()
