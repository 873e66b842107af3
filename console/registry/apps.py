"""The registry app: registered models, versions, uploads and audit events (the runtime starts its reconciler)."""

from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """Registered models, versions, uploads, audit events; the database's desired state for the engine."""

    name = "console.registry"
    label = "registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"
