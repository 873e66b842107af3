"""The live-metrics wiring that is the console's: snapshots published to the dashboards' channel-layer group.

The runtime (console/hosting/runtime.py) owns the process's one MetricsSampler and subscribes a GroupPublisher to
it; each /ws/metrics/ consumer joins `group_name()` and reads its backlog from the same sampler (or, in a cluster,
from the ClusterView), so an extra dashboard costs one send per second and nothing else. In a cluster the publisher also
sends each snapshot to the other processes (console/monitoring/cluster.py) and gives its dashboards the merge.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import orjson
from channels.layers import InMemoryChannelLayer, get_channel_layer

from console.monitoring.cluster import CLUSTER_GROUP, ClusterView, cluster_message
from console.outages import Outage
from console.peers.layer import process_group
from engine.api import Snapshot

GROUP = process_group("metrics")
MESSAGE_TYPE = "metrics.snapshot"


def group_name() -> str:
    """The channel-layer group of this process's dashboards (never shared with another process).

    With a layer shared by several replicas (Redis), the group name also carries the host and process id, so that
    no other process's dashboards are in it.
    """
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return GROUP
    return f"{GROUP}.{socket.gethostname()[:60]}.{os.getpid()}".replace("_", "-")


def snapshot_message(snapshot: Snapshot) -> str:
    """The JSON text a dashboard receives for one snapshot."""
    return orjson.dumps({"type": "snapshot", "snapshot": snapshot}).decode()


def cluster_enabled(layer: Any, has_workers: bool) -> bool:
    """Whether anyone else can hear this process: a shared layer (Redis), or workers sharing the in-memory one."""
    return layer is not None and (has_workers or not isinstance(layer, InMemoryChannelLayer))


class GroupPublisher:
    """Sends each snapshot, encoded once, to the group every metrics consumer of this process has joined; in a
    cluster, first to the other processes, and the dashboards get the cluster's merge."""

    def __init__(
        self,
        layer: Any = None,
        *,
        cluster: ClusterView | None = None,
        metrics: Callable[[], list[Any]] | None = None,
    ) -> None:
        self.layer = layer if layer is not None else get_channel_layer()
        self.group = group_name()
        self.cluster = cluster if cluster is not None and cluster.enabled else None
        self.metrics = metrics  # this worker's /metrics families, for the other workers to answer scrapes with
        self.outage = Outage("the channel layer (live metrics)")

    async def __call__(self, snapshot: Snapshot) -> None:
        if self.layer is None:
            return
        shown = snapshot
        try:
            if self.cluster is not None:
                families = self.metrics() if self.metrics is not None else None
                self.cluster.own_metrics = families
                shown = self.cluster.add_own(snapshot)
                await self.layer.group_send(CLUSTER_GROUP, cluster_message(self.cluster.identity, snapshot, families))
            await self.layer.group_send(self.group, {"type": MESSAGE_TYPE, "text": snapshot_message(shown)})
        except Exception as exc:  # Redis down: dashboards show "reconnecting" and catch up from the backlog later
            self.outage.failed(exc)
            return
        self.outage.recovered()
