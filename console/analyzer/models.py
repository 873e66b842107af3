"""Analyses of a model's configs: what was asked, what was measured, what is recommended, what was applied."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.audit.models import actor_name, actor_user
from console.registry.models import RegisteredModel


class AnalysisState(models.TextChoices):
    QUEUED = "QUEUED", "queued"  # waiting for a serving process to take it
    RUNNING = "RUNNING", "running"
    DONE = "DONE", "done"
    CANCELLED = "CANCELLED", "cancelled"
    FAILED = "FAILED", "failed"  # `error` says why (a load, the time limit, the process running it stopped)


OPEN_STATES = (AnalysisState.QUEUED, AnalysisState.RUNNING)


class Analysis(models.Model):
    """One sweep of candidate configs of one version over rising concurrency, and its outcome.

    `plan` holds the candidates (label and partial config), the concurrency levels, the seconds per point and the
    time limit; `points` what each candidate did at each level (engine.serving.analysis.LoadPoint, in order). One
    analysis runs at a time on the whole installation: `in_progress` is True while it is queued or running and unique.
    """

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="analyses")
    version = models.PositiveIntegerField(help_text="the version whose files and config were analysed")
    state = models.CharField(max_length=16, choices=AnalysisState.choices, default=AnalysisState.QUEUED)
    in_progress = models.BooleanField(null=True, unique=True, editable=False)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="the running process's last sign of life")
    budget_ms = models.FloatField(help_text="the p99 latency the recommendation must stay within")
    plan = models.JSONField(default=dict)
    sample_inputs = models.JSONField(default=dict, blank=True, help_text="uploaded inputs; empty: random data")
    points = models.JSONField(default=list, blank=True)
    recommendation = models.JSONField(default=dict, blank=True)
    note = models.TextField(blank=True, help_text="why there is no recommendation, when there is none")
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    applied_version = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "analyses"

    def __str__(self) -> str:
        return f"analysis {self.pk} of {self.model.name}/{self.version} ({self.state})"

    @property
    def label(self) -> str:
        """How the audit log names it."""
        return f"{self.model.name}/{self.version}#analysis-{self.pk}"

    @property
    def planned_points(self) -> int:
        return len(self.plan.get("candidates", [])) * len(self.plan.get("concurrency", []))

    def set_requester(self, actor: Any) -> None:
        self.requested_by, self.requested_by_name = actor_user(actor), actor_name(actor)

    # ---- state transitions, each saving what it changed

    def begin(self) -> None:
        self.state, self.started_at, self.heartbeat_at = AnalysisState.RUNNING, timezone.now(), timezone.now()
        self.save(update_fields=["state", "started_at", "heartbeat_at"])

    def end(self, state: AnalysisState, error: str = "", recommendation: dict | None = None, note: str = "") -> None:
        """Over: DONE, CANCELLED or FAILED; the slot for the next analysis is free."""
        self.state, self.error, self.in_progress = state, error, None
        self.recommendation, self.note = recommendation or {}, note
        self.finished_at = timezone.now()
        self.save(update_fields=["state", "error", "in_progress", "recommendation", "note", "finished_at"])
