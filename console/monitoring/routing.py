"""WebSocket routes of the monitoring app (included by console/hosting/routing.py)."""

from __future__ import annotations

from django.urls import path

from console.monitoring.consumers import MetricsConsumer

websocket_urlpatterns = [
    path("ws/metrics/", MetricsConsumer.as_asgi(), name="ws-metrics"),
]
