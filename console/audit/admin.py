"""Django admin view of the audit trail: read only (events are written by the changes they record)."""

from __future__ import annotations

from django.contrib import admin

from console.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_name", "action", "object"]
    list_filter = ["action"]
    search_fields = ["object", "actor_name"]
    readonly_fields = ["created_at", "actor", "actor_name", "action", "object", "detail"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
