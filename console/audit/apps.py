"""The audit app: the audit trail's events (the registry, accounts and analyses write them)."""

from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    """Audit events: the trail every change of the registry, the accounts and the analyses leaves."""

    name = "console.audit"
    label = "audit"
    verbose_name = "Audit trail"
    default_auto_field = "django.db.models.BigAutoField"
