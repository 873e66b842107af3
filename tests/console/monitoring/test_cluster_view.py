"""The cluster view on three real replicas over Redis: its total is the sum of the replicas' own counters, whichever
replica the dashboard's socket lands on, and narrowing to a replica shows that replica's counter."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import orjson
import pytest
import websockets

from tests.console.live_http import metric, session_cookie
from tests.console.monitoring.conftest import SIMPLE_REQUEST, replica_server

pytestmark = pytest.mark.server

DEADLINE_S = 60
SENT = (2, 5, 3)  # requests to each replica, so that every replica's share differs


def infer(url: str) -> None:
    request = urllib.request.Request(url + "/v2/models/simple/infer", data=SIMPLE_REQUEST)
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200


def counter(server) -> int:
    """`simple` v1's nv_inference_request_success on one replica's /metrics (its own, as Prometheus scrapes it)."""
    (value,) = [
        v for labels, v in metric(server, "nv_inference_request_success").items() if ("model", "simple") in labels
    ]
    return int(value)


async def cluster_until(url: str, cookie: str, total: int, replicas: list[str]) -> dict:
    """The first cluster snapshot on `url`'s stream that counts `total` requests of `simple` v1 over `replicas`."""
    socket_url = url.replace("http://", "ws://") + "/ws/metrics/?window=0"
    async with websockets.connect(socket_url, additional_headers={"Cookie": cookie}, origin=url) as stream:
        backlog = orjson.loads(await asyncio.wait_for(stream.recv(), DEADLINE_S))
        assert backlog["process"] in replicas and [r["name"] for r in backlog["replicas"]][0] == backlog["process"]
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            snapshot = orjson.loads(await asyncio.wait_for(stream.recv(), DEADLINE_S))["snapshot"]
            (simple,) = [m for m in snapshot["models"] if m["name"] == "simple"]
            if simple["success_count"] == total and sorted(r["name"] for r in snapshot["replicas"]) == replicas:
                return snapshot
        pytest.fail(f"{url}'s cluster view never counted {total} requests over {replicas}")


async def replica_count(url: str, cookie: str, replica: str) -> int:
    """`simple` v1's success count in the newest snapshot of `replica`, asked for on `url`'s stream."""
    socket_url = url.replace("http://", "ws://") + f"/ws/metrics/?window=5&replica={replica}"
    async with websockets.connect(socket_url, additional_headers={"Cookie": cookie}, origin=url) as stream:
        backlog = orjson.loads(await asyncio.wait_for(stream.recv(), DEADLINE_S))
        assert backlog["replica"] == replica and "replicas" not in backlog["snapshots"][-1]
        (simple,) = [m for m in backlog["snapshots"][-1]["models"] if m["name"] == "simple"]
        return simple["success_count"]


def test_the_cluster_total_is_the_sum_of_the_replicas_counters(cluster):
    servers = [replica_server(cluster, index) for index in range(3)]
    for server, count in zip(servers, SENT, strict=True):
        for _ in range(count):
            infer(server.base_url)
    counters = [counter(server) for server in servers]  # what Prometheus scrapes from each pod
    assert all(count >= sent for count, sent in zip(counters, SENT, strict=True))
    names = sorted(replica.name for replica in cluster.replicas)
    cookie = session_cookie(servers[0])  # sessions live in the shared database: good on every replica
    for server in servers:  # whichever replica the dashboard lands on
        snapshot = asyncio.run(cluster_until(server.base_url, cookie, sum(counters), names))
        (simple,) = [m for m in snapshot["models"] if m["name"] == "simple"]
        assert simple["success_count"] == sum(counters)
    # and narrowed to one replica, each replica's own counter, exactly as its /metrics says
    for replica, count in zip(cluster.replicas, counters, strict=True):
        assert asyncio.run(replica_count(servers[1].base_url, cookie, replica.name)) == count
