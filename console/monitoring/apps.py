"""The monitoring app: live charts and the metrics WebSocket (the runtime starts the sampler)."""

from __future__ import annotations

from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Live charts and the metrics WebSocket."""

    name = "console.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"
