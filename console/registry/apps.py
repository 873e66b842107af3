"""The registry app's configuration: starts the reconciler once the process's engine has started."""

from __future__ import annotations

from django.apps import AppConfig


class RegistryConfig(AppConfig):
    """Registered models, versions, uploads, audit events; the database's desired state for the engine."""

    name = "console.registry"
    label = "registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from console import engine_link
        from console.registry.reconciler import recover_and_follow

        engine_link.on_engine_started(recover_and_follow)
