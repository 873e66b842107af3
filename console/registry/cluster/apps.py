"""The cluster app's configuration."""

from __future__ import annotations

from django.apps import AppConfig


class ClusterConfig(AppConfig):
    """Replicas and the state of each model version on each of them."""

    name = "console.registry.cluster"
    label = "cluster"
    verbose_name = "Cluster"
    default_auto_field = "django.db.models.BigAutoField"
