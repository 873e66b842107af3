"""Analyses in the Django admin, read-only: they change through the API and the runner."""

from __future__ import annotations

from django.contrib import admin

from console.analyzer.models import Analysis


@admin.register(Analysis)
class AnalysisAdmin(admin.ModelAdmin):
    list_display = ("id", "model", "version", "state", "requested_by_name", "created_at", "applied_version")
    list_filter = ("state",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
