"""Registered models and their versions: the desired state the engine is reconciled to."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from engine.api import MODEL_NAME_RULE, model_name_problem

__all__ = [
    "MODEL_NAME_RULE",
    "model_name_validator",
    "RegisteredModel",
    "ModelVersion",
]


def model_name_validator(value: str) -> None:
    """The engine's rule for model names (engine.config.names): a folder name and URL segment on every platform."""
    problem = model_name_problem(value)
    if problem is not None:
        raise ValidationError(problem, code="invalid")


class VersionState(models.TextChoices):
    """Where a version stands in the engine of this process."""

    PENDING = "PENDING", "pending"  # should load; the reconciler has not got to it yet
    LOADING = "LOADING", "loading"
    READY = "READY", "ready"
    FAILED = "FAILED", "failed"  # trial load or engine load failed; `error` says why
    UNLOADED = "UNLOADED", "unloaded"


# states a version leaves for UNLOADED once it is no longer wanted and the engine no longer has it
LIVE_STATES = (VersionState.PENDING, VersionState.LOADING, VersionState.READY)
# a version's state across replicas is the first of these any live replica reports
CLUSTER_ORDER = (
    VersionState.READY,
    VersionState.LOADING,
    VersionState.PENDING,
    VersionState.FAILED,
    VersionState.UNLOADED,
)


def engine_transition(state: str, should_load: bool, ready: bool, failure: str | None) -> tuple[str, str] | None:
    """The (state, error) a version takes from what one engine made of it (ready, or failed with a reason), given
    whether it should load; None when it stays as it is."""
    if failure is not None:
        return VersionState.FAILED, failure
    if ready:
        return VersionState.READY, ""
    if not should_load and state in LIVE_STATES:
        return VersionState.UNLOADED, ""
    if should_load and state == VersionState.READY:
        return VersionState.PENDING, ""  # the engine lost it; the next pass loads it again
    return None


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
    # the engine's policy in its JSON form (TrafficPolicy.to_dict); empty: every request to the active version
    traffic_policy = models.JSONField(default=dict, blank=True)
    # under the memory budget (engine.serving.memory_budget): loaded on its first request and evictable when idle;
    # pinned: never evicted once loaded. Each replica decides for itself when to load and evict
    on_demand = models.BooleanField(default=False)
    pinned = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def active_number(self) -> int | None:
        return self.active_version.number if self.active_version_id else None

    @property
    def traffic_mode(self) -> str:
        """active, canary or shadow: how requests that name no version are shared among its versions."""
        return str(self.traffic_policy.get("mode", "active")) if self.traffic_policy else "active"

    @property
    def shown_config(self) -> dict[str, Any]:
        """The config its page describes: the active version's, else the newest checked one's (empty if none)."""
        if self.active_version_id and self.active_version.config:
            return self.active_version.config
        newest = self.versions.exclude(config={}).order_by("-number").first()
        return newest.config if newest is not None else {}

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

    @property
    def loadable(self) -> bool:
        """Whether a load (a FAILED one's retry) could succeed: its files are in the store. An upload that failed
        its checks (not a model, a config that contradicts it) kept none, and would fail the same way again."""
        return bool(self.artifact)

    # ---- state transitions: the version's state machine, in one place; each saves only what it changed

    def request_load(self) -> None:
        """Ask for it to serve; a FAILED or UNLOADED version goes back to PENDING (as Triton, a load retries)."""
        self.should_load = True
        if self.state in (VersionState.FAILED, VersionState.UNLOADED):
            self.state, self.error = VersionState.PENDING, ""
        self.save(update_fields=["should_load", "state", "error", "state_changed_at"])
        self._retry_on_replicas()

    def request_unload(self) -> None:
        """Ask for it to stop serving; the reconciler unloads it and marks it UNLOADED."""
        self.should_load = False
        self.save(update_fields=["should_load", "state_changed_at"])

    def reconfigure(self, config: dict[str, Any]) -> None:
        """Serve with another config: PENDING until the engine has reloaded it (READY) or refused it (FAILED)."""
        self.config = config
        if self.should_load:
            self.state, self.error = VersionState.PENDING, ""
        self.save(update_fields=["config", "state", "error", "state_changed_at"])
        self._retry_on_replicas()

    def _retry_on_replicas(self) -> None:
        """Replicas where it failed try it again (registry/cluster: each replica leaves out what failed there)."""
        self.on_replicas.filter(state=VersionState.FAILED).update(state=VersionState.PENDING, error="")

    def fail(self, reason: str) -> None:
        """It could not load (trial load, engine load, a bad config): FAILED with the reason."""
        self.state, self.error = VersionState.FAILED, reason
        self.save(update_fields=["state", "error", "state_changed_at"])

    def apply_engine_state(self, ready: bool, failure: str | None) -> bool:
        """Take what the engine made of it (READY, or failed with a reason); True when the row changed."""
        return self._become(engine_transition(self.state, self.should_load, ready, failure))

    def take_replica_states(self, states: list[tuple[str, str]]) -> bool:
        """Take its state across the live replicas, each (state, error): READY where any of them serves it, else
        LOADING, PENDING, FAILED (with the first reason) or UNLOADED; unchanged when none has a state for it."""
        if not states:
            return False
        best = min(states, key=lambda pair: CLUSTER_ORDER.index(pair[0]))
        return self._become((best[0], best[1] if best[0] == VersionState.FAILED else ""))

    def _become(self, change: tuple[str, str] | None) -> bool:
        if change is None or change == (self.state, self.error):
            return False
        self.state, self.error = change
        self.save(update_fields=["state", "error", "state_changed_at"])
        return True
