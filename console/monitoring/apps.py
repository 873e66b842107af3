"""The monitoring app: starts the sampler once the engine has started."""

from __future__ import annotations

from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Live charts and the metrics WebSocket."""

    name = "console.monitoring"
    label = "monitoring"
    verbose_name = "Monitoring"

    def ready(self) -> None:
        from console import engine_link
        from console.monitoring.live import start_monitoring_hook, stop_monitoring_hook

        engine_link.on_engine_started(start_monitoring_hook)
        engine_link.on_engine_stopping(stop_monitoring_hook)
