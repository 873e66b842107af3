"""The /ws/metrics/ consumer: a backlog on connect, then one snapshot per second from the runtime's sampler.

Client messages: {"model": "name" | null} narrows to one model (or widens back), {"window": seconds} asks for a
longer or shorter backlog, {"replica": "name" | null} narrows a cluster's view to one replica (or worker) or widens
it back to the whole cluster (console/monitoring/cluster.py); each answers with a fresh backlog, which names the
replicas to choose from and the one answering (`process`). `?history=1` (the overview page) adds the sampler's
closed minutes of the last hour and the hour's figures to each backlog; snapshots carry each minute as it closes.
An ensemble narrows to itself and its step models, and each snapshot carries its `pipeline` numbers
(console/monitoring/pipelines.py). Codes: 4401 not signed in, 4403 no console role.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import orjson
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from console.accounts.permissions import can_view_models
from console.layer_tasks import EndingReceives
from console.monitoring.cluster import ClusterView
from console.monitoring.live import group_name
from console.monitoring.pipelines import Selection, model_choices
from console.runtime_of import runtime_of
from engine.api import BACKLOG_SECONDS, InferenceServer

DEFAULT_WINDOW_S = 300
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class MetricsConsumer(AsyncWebsocketConsumer):
    """Streams live metrics to one dashboard."""

    model: str | None = None
    replica: str | None = None
    window: float = DEFAULT_WINDOW_S
    history: bool = False
    shown_t: int = 0  # narrowed to a replica: the time of the newest of its snapshots sent
    _channel_layer: Any = None

    # Channels sets the layer as the socket opens and cancels its receive once when the socket closes: a receive
    # that loses that cancellation (console/layer_tasks.py) would keep the consumer, and its Redis reads, for ever
    @property
    def channel_layer(self) -> Any:
        return self._channel_layer

    @channel_layer.setter
    def channel_layer(self, layer: Any) -> None:
        self._channel_layer = None if layer is None else EndingReceives(layer)

    async def connect(self) -> None:
        user = self.scope.get("user")
        # accept first, then close: a code is only seen by the browser on an open socket
        await self.accept()
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(can_view_models)(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = group_name()
        await self.channel_layer.group_add(self.group, self.channel_name)
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.model = (query.get("model") or [None])[0] or None
        self.replica = (query.get("replica") or [None])[0] or None
        self.window = _window(query.get("window", [DEFAULT_WINDOW_S])[0])
        self.history = query.get("history", ["0"])[0] == "1"
        await self.send_backlog()

    async def disconnect(self, code: int) -> None:
        group = getattr(self, "group", None)
        if group is not None:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        try:
            message = orjson.loads(text_data or bytes_data or b"")
            if not isinstance(message, dict):
                raise ValueError("expected a JSON object")
            if "model" in message:
                model = message["model"]
                if model is not None and not isinstance(model, str):
                    raise ValueError("'model' must be a model name or null")
                self.model = model or None
            if "replica" in message:
                replica = message["replica"]
                if replica is not None and not isinstance(replica, str):
                    raise ValueError("'replica' must be a replica's name or null")
                self.replica = replica or None
            if "window" in message:
                self.window = _window(message["window"])
        except (orjson.JSONDecodeError, ValueError) as exc:
            await self.send_json({"type": "error", "error": f"unreadable message: {exc}"})
            return
        await self.send_backlog()

    async def metrics_snapshot(self, event: dict[str, Any]) -> None:
        """One snapshot from the group (this process's, or the cluster's): passed on as it came, or as this
        client's selection sees it; narrowed to a replica, that replica's snapshots since the last one sent."""
        cluster = self.cluster()
        if self.replica is not None and cluster is not None:
            selection = self.selection()
            for snapshot in cluster.since(self.replica, self.shown_t):
                self.shown_t = snapshot["t"]
                await self.send_json({"type": "snapshot", "snapshot": selection.apply(snapshot)})
            return
        if self.model is None:
            await self.send(text_data=event["text"])
            return
        message = orjson.loads(event["text"])
        message["snapshot"] = self.selection().apply(message["snapshot"])
        await self.send_json(message)

    async def send_backlog(self) -> None:
        runtime = runtime_of(self.scope)
        sampler = runtime.sampler if runtime is not None else None
        cluster = self.cluster()
        selection = self.selection()
        if cluster is not None:
            snapshots = cluster.backlog(self.window, self.replica)
        else:
            snapshots = sampler.backlog(seconds=self.window) if sampler is not None else []
        self.shown_t = snapshots[-1]["t"] if snapshots else 0
        backlog = {
            "type": "backlog",
            "model": self.model,
            "replica": self.replica,
            "window": self.window,
            "interval": sampler.interval if sampler is not None else None,
            "snapshots": [selection.apply(snapshot) for snapshot in snapshots],
            "pipeline": selection.pipeline.describe() if selection.pipeline is not None else None,
            "ensembles": model_choices(self.server())[0],
            "process": runtime.identity.name if runtime is not None else None,
            "replicas": cluster.replicas() if cluster is not None else [],
        }
        if self.history:
            if cluster is not None:
                backlog["minutes"], backlog["hour"] = cluster.minutes(), cluster.hour()
            elif sampler is not None:
                backlog["minutes"], backlog["hour"] = sampler.history.minutes(), sampler.history.summary()
            else:
                backlog["minutes"], backlog["hour"] = [], None
        await self.send_json(backlog)

    def cluster(self) -> ClusterView | None:
        """The runtime's cluster view when it is on (a shared layer, or workers); None for a process alone."""
        runtime = runtime_of(self.scope)
        cluster = runtime.cluster if runtime is not None else None
        return cluster if cluster is not None and cluster.enabled else None

    def selection(self) -> Selection:
        """This client's model as the engine serves it now (an ensemble loaded later is seen on the next snapshot)."""
        return Selection.of(self.server(), self.model)

    def server(self) -> InferenceServer | None:
        runtime = runtime_of(self.scope)
        return runtime.server if runtime is not None else None

    async def send_json(self, content: Any) -> None:
        await self.send(text_data=orjson.dumps(content).decode())


def _window(value: Any) -> float:
    """Backlog seconds asked for, clamped to what the sampler keeps."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"'window' must be a number of seconds, got {value!r}") from None
    return min(max(seconds, 0.0), float(BACKLOG_SECONDS))
