"""The audit trail: one event per change, naming who made it even after the account is gone."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import models

from engine.api import Principal

__all__ = ["AuditEvent", "actor_user", "actor_name"]


def actor_user(actor: Any) -> Any:
    """The user behind an actor (a user, a Principal or a plain name such as 'system'), or None."""
    if isinstance(actor, Principal):
        if actor.user_id is None:
            return None
        from django.contrib.auth import get_user_model

        return get_user_model().objects.filter(pk=actor.user_id).first()
    return actor if getattr(actor, "is_authenticated", False) else None


def actor_name(actor: Any) -> str:
    """How the audit log names an actor."""
    if isinstance(actor, Principal):
        return actor.name
    user = actor_user(actor)
    return user.get_username() if user is not None else (actor if isinstance(actor, str) else "")


class AuditEvent(models.Model):
    """Who did what to which model or version, when, with the details that matter."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # kept apart from `actor` so the trail still names a user after the account is deleted
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    object = models.CharField(max_length=256, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        db_table = "registry_auditevent"  # the table the registry app made: kept, with its rows
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name or 'system'} {self.action} {self.object}"

    @property
    def detail_text(self) -> str:
        """The details as one line of JSON (the audit page and its CSV export)."""
        return json.dumps(self.detail, sort_keys=True) if self.detail else ""

    @classmethod
    def record(cls, actor: Any, action: str, obj: str, **detail: Any) -> AuditEvent:
        """Write one event; `actor` is a user, a Principal, a name, or None for the system (the reconciler)."""
        return cls.objects.create(
            actor=actor_user(actor), actor_name=actor_name(actor), action=action, object=obj, detail=detail
        )
