"""The live-metrics wiring that is the console's: snapshots published to the dashboards' channel-layer group.

The runtime (console/runtime.py) owns the process's one MetricsSampler and subscribes a GroupPublisher to it; each
/ws/metrics/ consumer joins `group_name()` and reads its backlog from the same sampler, so an extra dashboard costs
one send per second and nothing else.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import orjson
from channels.layers import InMemoryChannelLayer, get_channel_layer

from console.outages import Outage
from engine.monitoring.sampler import Snapshot

GROUP = "metrics"
MESSAGE_TYPE = "metrics.snapshot"


def group_name() -> str:
    """The channel-layer group of this process's snapshots.

    With a layer shared by several replicas (Redis), each process streams its own numbers: the group name then
    carries the host and process id, so dashboards never get two replicas' snapshots interleaved.
    """
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return GROUP
    return f"{GROUP}.{socket.gethostname()[:60]}.{os.getpid()}".replace("_", "-")


def snapshot_message(snapshot: Snapshot) -> str:
    """The JSON text a dashboard receives for one snapshot."""
    return orjson.dumps({"type": "snapshot", "snapshot": snapshot}).decode()


class GroupPublisher:
    """Sends each snapshot, encoded once, to the group every metrics consumer of this process has joined."""

    def __init__(self, layer: Any = None) -> None:
        self.layer = layer if layer is not None else get_channel_layer()
        self.group = group_name()
        self.outage = Outage("the channel layer (live metrics)")

    async def __call__(self, snapshot: Snapshot) -> None:
        if self.layer is None:
            return
        try:
            await self.layer.group_send(self.group, {"type": MESSAGE_TYPE, "text": snapshot_message(snapshot)})
        except Exception as exc:  # Redis down: dashboards show "reconnecting" and catch up from the backlog later
            self.outage.failed(exc)
            return
        self.outage.recovered()
