"""Registered models, their versions and the audit trail: the desired state the engine is reconciled to."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

# Triton-safe: a folder name on every filesystem, never hidden, never a path; the store and URLs use it as is
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
MODEL_NAME_RULE = "letters, digits, '_', '-' and '.', starting with a letter or digit, at most 128 characters"
model_name_validator = RegexValidator(MODEL_NAME_PATTERN, f"a model name may hold only {MODEL_NAME_RULE}")


class VersionState(models.TextChoices):
    """Where a version stands in the engine of this process."""

    PENDING = "PENDING", "pending"  # should load; the reconciler has not got to it yet
    LOADING = "LOADING", "loading"
    READY = "READY", "ready"
    FAILED = "FAILED", "failed"  # trial load or engine load failed; `error` says why
    UNLOADED = "UNLOADED", "unloaded"


class RegisteredModel(models.Model):
    """A model people manage: its versions, and which one takes unversioned traffic."""

    name = models.CharField(max_length=128, unique=True, validators=[model_name_validator])
    description = models.TextField(blank=True)
    backend = models.CharField(max_length=64, blank=True)
    platform = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    active_version = models.ForeignKey(
        "ModelVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def active_number(self) -> int | None:
        return self.active_version.number if self.active_version_id else None

    def next_version_number(self, on_disk: list[int]) -> int:
        """One past the highest number in the database or on disk, so a number is never reused."""
        highest = self.versions.aggregate(models.Max("number"))["number__max"] or 0
        return max([highest, *on_disk]) + 1


class ModelVersion(models.Model):
    """One uploaded (or imported) version: where its files are, what it is, and where it stands."""

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    artifact = models.CharField(max_length=512, blank=True, help_text="version folder, relative to the store")
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.BigIntegerField(default=0)
    config = models.JSONField(default=dict, blank=True, help_text="the effective config it was checked with")
    notes = models.TextField(blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    uploaded_at = models.DateTimeField(auto_now_add=True)
    state = models.CharField(max_length=16, choices=VersionState.choices, default=VersionState.PENDING)
    error = models.TextField(blank=True)
    should_load = models.BooleanField(default=False)
    state_changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model__name", "number"]
        constraints = [models.UniqueConstraint(fields=["model", "number"], name="registry_version_unique_number")]

    def __str__(self) -> str:
        return f"{self.model.name}/{self.number}"

    @property
    def label(self) -> str:
        return f"{self.model.name}/{self.number}"

    @property
    def is_active(self) -> bool:
        return self.model.active_version_id == self.pk


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
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name or 'system'} {self.action} {self.object}"

    @classmethod
    def record(cls, actor: Any, action: str, obj: str, **detail: Any) -> AuditEvent:
        """Write one event; `actor` is a user, or None for the system (the reconciler, the shell)."""
        user = actor if getattr(actor, "is_authenticated", False) else None
        name = user.get_username() if user is not None else (actor if isinstance(actor, str) else "")
        return cls.objects.create(actor=user, actor_name=name, action=action, object=obj, detail=detail)
