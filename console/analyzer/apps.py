"""The analyzer app: analyses of a model's configs under in-process load (the runtime runs them)."""

from __future__ import annotations

from django.apps import AppConfig


class AnalyzerConfig(AppConfig):
    """Analyses: their plans, measured points, recommendations, and the versions applied from them."""

    name = "console.analyzer"
    label = "analyzer"
    verbose_name = "Model analyzer"
    default_auto_field = "django.db.models.BigAutoField"
