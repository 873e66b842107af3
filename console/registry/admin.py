"""Django admin views of the registry (read mostly: changes go through the console so they are audited)."""

from __future__ import annotations

from django.contrib import admin

from console.registry.models import ModelVersion, RegisteredModel


class VersionInline(admin.TabularInline):
    model = ModelVersion
    extra = 0
    fields = ["number", "state", "should_load", "error", "sha256", "size", "uploaded_by", "uploaded_at"]
    readonly_fields = fields
    can_delete = False


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ["name", "platform", "backend", "active_version", "created_by", "created_at"]
    search_fields = ["name", "description"]
    readonly_fields = ["name", "backend", "platform", "created_by", "created_at", "active_version", "traffic_policy"]
    inlines = [VersionInline]

    def has_delete_permission(self, request, obj=None) -> bool:
        """Deleting goes through the console: audited, its folder removed, refused while an ensemble calls it."""
        return False
