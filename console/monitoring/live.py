"""The process's one MetricsSampler and its publisher to the channel layer; the wiring the ASGI app calls.

`start_monitoring(server)` starts sampling and publishing (from the ASGI lifespan or the engine-started hook);
`metrics_app(server, fallback)` is the /metrics ASGI app over the same sampler. Consumers read the backlog from
`current_sampler()` and receive each snapshot as pre-encoded JSON through the group `group_name()`, so an extra
dashboard costs one send per second and nothing else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

import orjson
from channels.layers import InMemoryChannelLayer, get_channel_layer

from engine.monitoring.prometheus import ASGIApp, MetricsApp
from engine.monitoring.sampler import MetricsSampler, Snapshot

if TYPE_CHECKING:
    from engine.server import InferenceServer

logger = logging.getLogger("console.monitoring")

GROUP = "metrics"
MESSAGE_TYPE = "metrics.snapshot"

_sampler: MetricsSampler | None = None


def group_name() -> str:
    """The channel-layer group of this process's snapshots.

    With a layer shared by several replicas (Redis), each process streams its own numbers: the group name then
    carries the host and process id, so dashboards never get two replicas' snapshots interleaved.
    """
    layer = get_channel_layer()
    if layer is None or isinstance(layer, InMemoryChannelLayer):
        return GROUP
    return f"{GROUP}.{socket.gethostname()[:60]}.{os.getpid()}".replace("_", "-")


def sampler_for(server: InferenceServer) -> MetricsSampler:
    """The process's sampler over `server`, made on first use (the same one for /metrics and WebSockets)."""
    global _sampler
    if _sampler is None or _sampler.server is not server:
        _sampler = MetricsSampler(server)
    return _sampler


def current_sampler() -> MetricsSampler | None:
    """The sampler this process runs, or None before the engine has one."""
    return _sampler


def set_sampler(sampler: MetricsSampler | None) -> None:
    """Make `sampler` the process's (tests, and a server built outside the ASGI app)."""
    global _sampler
    _sampler = sampler


def snapshot_message(snapshot: Snapshot) -> str:
    """The JSON text a dashboard receives for one snapshot."""
    return orjson.dumps({"type": "snapshot", "snapshot": snapshot}).decode()


class GroupPublisher:
    """Sends each snapshot, encoded once, to the group every metrics consumer of this process has joined."""

    def __init__(self, layer: Any = None) -> None:
        self.layer = layer if layer is not None else get_channel_layer()
        self.group = group_name()

    async def __call__(self, snapshot: Snapshot) -> None:
        if self.layer is None:
            return
        await self.layer.group_send(self.group, {"type": MESSAGE_TYPE, "text": snapshot_message(snapshot)})


def start_monitoring(server: InferenceServer) -> list[asyncio.Task[None]]:
    """Start the sampler of `server` and its publisher on the running loop; returns the tasks (one)."""
    sampler = sampler_for(server)
    if not any(isinstance(s, GroupPublisher) for s in sampler.subscribers):
        sampler.subscribe(GroupPublisher())
    task = sampler.start()
    logger.info("monitoring: sampling every %.0f s, streaming to /ws/metrics/", sampler.interval)
    return [task]


async def start_monitoring_hook(server: InferenceServer) -> None:
    """engine_link's started hook: the same as start_monitoring."""
    start_monitoring(server)


async def stop_monitoring() -> None:
    """Stop the process's sampler, if one runs."""
    if _sampler is not None:
        await _sampler.stop()


async def stop_monitoring_hook(server: InferenceServer) -> None:
    """engine_link's stopping hook: the sampler ends before the engine it reads."""
    await stop_monitoring()


def metrics_app(server: InferenceServer, fallback: ASGIApp | None = None) -> MetricsApp:
    """/metrics over the process's sampler; every other path goes to `fallback` (the v2 front end)."""
    return MetricsApp(server, sampler_for(server), fallback=fallback)
