"""The console's Django app configuration."""

from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """Infera's console: pages, management API, WebSocket consumers and management commands."""

    name = "console"
    verbose_name = "Infera console"
    default_auto_field = "django.db.models.BigAutoField"
