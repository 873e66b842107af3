"""The cluster view: every serving process's snapshots, shared through the channel layer and merged in each one.

Each replica (and each worker of `serve --workers`) publishes its snapshot of the second to the CLUSTER_GROUP of the
channel layer (Redis across replicas, console/peers/layer.py between workers without Redis). Every process keeps the
snapshots it hears from the others for as long as its own (15 minutes), and at each of its own samples lays the
newest of each one still reporting over its own (engine/monitoring/merge.py): that cluster snapshot is what its
dashboards receive, with `replicas` listing each process's own figures and devices. A dashboard can narrow the view
to one replica, whichever process its socket landed on.

What another process sent is checked before it is kept (a replica name, a pid, a snapshot with the fields and types
the merge reads, /metrics families the exposition can hold): a malformed message is refused alone and counted, never
part of a merge.

A process silent for GONE_AFTER_INTERVALS samples leaves the totals (it stopped, or cannot reach the layer); it stays
a choice of the replica filter until its last snapshot leaves the backlog. With the in-memory layer and no workers
there is nobody to hear: the view is off and dashboards get the process's own snapshots, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from console.config import REPLICA_NAME
from console.layer_tasks import end_task
from console.outages import Outage, is_idle_wait
from console.peers.identity import ProcessIdentity
from engine.api import (
    BACKLOG_SECONDS,
    MetricsSampler,
    Snapshot,
    check_families,
    check_snapshot,
    merge_figures,
    merge_snapshots,
)

logger = logging.getLogger("console.monitoring")

CLUSTER_GROUP = "monitoring.cluster"
MESSAGE_TYPE = "cluster.snapshot"
GONE_AFTER_INTERVALS = 5
PENDING_MINUTE_SECONDS = 5.0  # how long a closed minute waits for the other processes to close theirs
REJOIN_SECONDS = 60.0  # Redis expires group membership: renewed this often

Figures = dict[str, Any]


@dataclass
class Peer:
    """Another serving process, as its snapshots reach this one."""

    name: str
    replica: str
    pid: int
    seen_at: float  # this process's clock when its last snapshot arrived
    latest: Snapshot
    snapshots: deque[tuple[int, bytes]] = field(default_factory=deque)  # (t in ms, the snapshot's JSON)
    minutes: dict[int, Figures] = field(default_factory=dict)
    hour: Figures | None = None
    metrics: list[Any] | None = None  # its /metrics families, when it is a worker of this replica


class ClusterView:
    """The newest snapshot of every process that publishes to the cluster group, and their merge at each sample."""

    def __init__(
        self,
        identity: ProcessIdentity,
        sampler: MetricsSampler,
        *,
        enabled: bool,
        clock: Callable[[], float] = time.monotonic,
        backlog_seconds: float = BACKLOG_SECONDS,
    ) -> None:
        self.identity = identity
        self.sampler = sampler
        self.enabled = enabled
        self.clock = clock
        self.backlog_seconds = backlog_seconds
        self.peers: dict[str, Peer] = {}
        self.own_metrics: list[Any] | None = None
        self._merged: deque[tuple[int, bytes]] = deque()  # (t in ms, the cluster snapshot's JSON)
        self._pending_minute: tuple[Figures, float] | None = None  # our closed minute, and when it closed
        self._twins_warned: set[int] = set()

    @property
    def gone_after(self) -> float:
        return GONE_AFTER_INTERVALS * self.sampler.interval

    def live_peers(self) -> list[Peer]:
        now = self.clock()
        return [peer for _, peer in sorted(self.peers.items()) if now - peer.seen_at <= self.gone_after]

    def add_peer(self, message: dict[str, Any]) -> None:
        """A snapshot another process published (ours, coming back through the layer, is ignored); ValueError, and
        nothing kept, when the message is malformed."""
        name, replica, pid = _sender(message)
        if name == self.identity.name:
            if pid != os.getpid() and pid not in self._twins_warned:
                self._twins_warned.add(pid)
                logger.warning(
                    "another serving process (pid %d) is also named %r: give each replica its own INFERA_REPLICA_NAME",
                    pid,
                    name,
                )
            return
        text = message.get("text")
        if not isinstance(text, str | bytes):
            raise ValueError("a cluster snapshot's text must be JSON")
        text = text.encode() if isinstance(text, str) else text
        snapshot = check_snapshot(orjson.loads(text))
        metrics = message.get("metrics")
        if metrics is not None:
            check_families(metrics)
        now = self.clock()
        peer = self.peers.get(name)
        if peer is None or peer.pid != pid:  # new, or restarted: its history starts again
            peer = self.peers[name] = Peer(name, replica, pid, now, snapshot)
        peer.seen_at, peer.latest = now, snapshot
        peer.snapshots.append((snapshot["t"], text))
        if "minute" in snapshot:
            peer.minutes[snapshot["minute"]["t"]] = snapshot["minute"]
        if "hour" in snapshot:
            peer.hour = snapshot["hour"]
        peer.metrics = metrics
        self._trim(peer.snapshots, snapshot["t"])
        for t in [t for t in peer.minutes if t < snapshot["t"] - 3_600_000]:
            del peer.minutes[t]

    def add_own(self, snapshot: Snapshot) -> Snapshot:
        """Our snapshot of the second, merged with every live peer's newest: what our dashboards see now."""
        self._forget_silent()
        peers = self.live_peers()
        merged = merge_snapshots([snapshot, *(peer.latest for peer in peers)])
        merged = {**merged, "replicas": [self._replica(self.identity.name, self.identity.replica, snapshot)]}
        merged["replicas"] += [self._replica(p.name, p.replica, p.latest) for p in peers]
        if "minute" in snapshot:
            self._pending_minute = (snapshot["minute"], self.clock())
        minute = self._minute_ready(peers)
        if minute is not None:
            merged["minute"] = minute
        if "hour" in snapshot:
            merged["hour"] = merge_figures([snapshot["hour"], *(p.hour for p in peers if p.hour is not None)])
        self._merged.append((merged["t"], orjson.dumps(merged)))
        self._trim(self._merged, merged["t"])
        return merged

    def backlog(self, seconds: float | None, replica: str | None = None) -> list[Snapshot]:
        """The last `seconds` of the cluster (or of one replica's own snapshots), oldest first."""
        if replica == self.identity.name:
            return self.sampler.backlog(seconds=seconds)
        if replica is not None:
            peer = self.peers.get(replica)
            return _window(peer.snapshots, seconds) if peer is not None else []
        return _window(self._merged, seconds)

    def since(self, replica: str, t: int) -> list[Snapshot]:
        """One replica's snapshots taken after `t` (ms): what a dashboard narrowed to it has not seen yet."""
        if replica == self.identity.name:
            latest = self.sampler.latest
            return [latest] if latest is not None and latest["t"] > t else []
        peer = self.peers.get(replica)
        if peer is None:
            return []
        return [orjson.loads(text) for at, text in peer.snapshots if at > t]

    def replicas(self) -> list[dict[str, Any]]:
        """The replica filter's choices: this process, then every other one heard from, live or gone."""
        live = {peer.name for peer in self.live_peers()}
        choices = [{"name": self.identity.name, "replica": self.identity.replica, "state": "live"}]
        for name, peer in sorted(self.peers.items()):
            choices.append({"name": name, "replica": peer.replica, "state": "live" if name in live else "gone"})
        return choices

    def minutes(self) -> list[Figures]:
        """The last hour's closed minutes of every process, merged minute by minute."""
        own = {minute["t"]: minute for minute in self.sampler.history.minutes()}
        return [
            merge_figures([minute, *(p.minutes[t] for p in self.peers.values() if t in p.minutes)])
            for t, minute in sorted(own.items())
        ]

    def hour(self) -> Figures:
        own = self.sampler.history.summary()
        return merge_figures([own, *(p.hour for p in self.live_peers() if p.hour is not None)])

    def worker_metrics(self) -> list[tuple[str, list[Any]]]:
        """Each live worker of this replica (this one too) with its /metrics families as last published."""
        workers = [(self.identity.name, self.own_metrics)] if self.own_metrics is not None else []
        workers += [
            (peer.name, peer.metrics)
            for peer in self.live_peers()
            if peer.replica == self.identity.replica and peer.metrics is not None
        ]
        return sorted(workers, key=lambda worker: worker[0])

    def _minute_ready(self, peers: list[Peer]) -> Figures | None:
        """Our last closed minute merged with the others', once each has closed it too (or after a wait)."""
        if self._pending_minute is None:
            return None
        minute, closed_at = self._pending_minute
        t = minute["t"]
        if not all(t in p.minutes for p in peers) and self.clock() - closed_at < PENDING_MINUTE_SECONDS:
            return None
        self._pending_minute = None
        return merge_figures([minute, *(p.minutes[t] for p in peers if t in p.minutes)])

    def _forget_silent(self) -> None:
        now = self.clock()
        for name in [n for n, p in self.peers.items() if now - p.seen_at > self.backlog_seconds]:
            del self.peers[name]

    def _trim(self, kept: deque[tuple[int, bytes]], newest: int) -> None:
        while kept and kept[0][0] <= newest - self.backlog_seconds * 1000:
            kept.popleft()

    @staticmethod
    def _replica(name: str, replica: str, snapshot: Snapshot) -> dict[str, Any]:
        """One process's line in a cluster snapshot: its own figures and devices."""
        return {
            "name": name,
            "replica": replica,
            "t": snapshot["t"],
            "server": snapshot["server"],
            "devices": snapshot["devices"],
            "success_per_s": round(sum(m["success_per_s"] for m in snapshot["models"]), 3),
        }


def _sender(message: dict[str, Any]) -> tuple[str, str, int]:
    """The name, replica and pid a cluster message says it came from; ValueError unless each is one."""
    name, pid = message.get("name"), message.get("pid")
    replica = message.get("replica") or name
    for value in (name, replica):
        if not isinstance(value, str) or not REPLICA_NAME.fullmatch(value):
            raise ValueError(f"a cluster snapshot from {str(value)[:100]!r}, which is not a replica name")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        raise ValueError(f"a cluster snapshot from {name} with the pid {str(pid)[:20]!r}")
    return name, replica, pid


def _window(kept: deque[tuple[int, bytes]], seconds: float | None) -> list[Snapshot]:
    if not kept:
        return []
    since = kept[-1][0] - seconds * 1000 if seconds is not None else -math.inf
    return [orjson.loads(text) for t, text in kept if t > since]


def cluster_message(identity: ProcessIdentity, snapshot: Snapshot, metrics: list[Any] | None) -> dict[str, Any]:
    """What a process publishes to the cluster group each second."""
    message: dict[str, Any] = {
        "type": MESSAGE_TYPE,
        "name": identity.name,
        "replica": identity.replica,
        "pid": os.getpid(),
        "text": orjson.dumps(snapshot).decode(),
    }
    if metrics is not None:
        message["metrics"] = metrics
    return message


class ClusterListener:
    """Hears the other processes' snapshots on the channel layer and hands them to the view."""

    def __init__(self, view: ClusterView, layer: Any) -> None:
        self.view = view
        self.layer = layer
        self.outage = Outage("the channel layer (cluster view)")
        self.refused = 0  # malformed messages heard
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.run(), name="infera-cluster-listener")

    async def stop(self) -> None:
        """Cancel the listener and wait until it has ended."""
        task, self._task = self._task, None
        await end_task(task)

    async def run(self) -> None:
        """Receive until stopped; our own snapshot comes back each second, so the loop turns at least that often."""
        # the layer's default prefix: channels_redis receives every process-local channel of one prefix through one
        # list and one lock, so a channel of another prefix waits for its turn behind the dashboards' (5 s each)
        channel = await self.layer.new_channel()
        joined_at = -math.inf
        try:
            while True:
                if time.monotonic() - joined_at >= REJOIN_SECONDS:
                    try:
                        await self.layer.group_add(CLUSTER_GROUP, channel)
                    except Exception as exc:  # Redis down: the view shows this process alone until it is back
                        self.outage.failed(exc)
                        await asyncio.sleep(self.view.sampler.interval)
                        continue
                    joined_at = time.monotonic()
                try:
                    message = await self.layer.receive(channel)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if not is_idle_wait(exc):
                        self.outage.failed(exc)
                        joined_at = -math.inf
                        await asyncio.sleep(self.view.sampler.interval)
                    continue
                self.outage.recovered()
                if message.get("type") == MESSAGE_TYPE:
                    try:
                        self.view.add_peer(message)
                    except ValueError as exc:  # a malformed message: refused alone, logged now and then
                        self.refused += 1
                        if self.refused == 1 or self.refused % 100 == 0:
                            logger.warning("%d cluster snapshots refused; the last: %s", self.refused, exc)
                    except Exception:  # noqa: BLE001 - one unreadable snapshot must not end the view
                        logger.exception("a cluster snapshot could not be read")
        finally:
            with contextlib.suppress(Exception):
                await self.layer.group_discard(CLUSTER_GROUP, channel)
