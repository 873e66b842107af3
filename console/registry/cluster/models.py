"""Replicas (each serving process on this database, by INFERA_REPLICA_NAME) and each version's state on each one.

Every replica renews its row on a heartbeat; one whose heartbeat stopped for GONE_AFTER_BEATS beats (or that
stopped cleanly) is gone: its states are shown as such and no longer counted. Each replica's reconciler writes the
state of the versions it loads, serves or failed; the registry's own version state is the summary of the live ones.
"""

from __future__ import annotations

import datetime

from django.db import models
from django.utils import timezone

from console.registry.models import ModelVersion, VersionState

GONE_AFTER_BEATS = 3  # missed heartbeats before a replica counts as gone
FORGOTTEN_AFTER = datetime.timedelta(hours=1)  # gone this long, a replica's row is deleted (pods come and go)


class ReplicaQuerySet(models.QuerySet):
    def live(self, now: datetime.datetime | None = None) -> ReplicaQuerySet:
        """Replicas whose heartbeat is current."""
        return self.filter(stopped_at__isnull=True, expires_at__gte=now or timezone.now())

    def gone(self, now: datetime.datetime | None = None) -> ReplicaQuerySet:
        """Replicas that stopped, or stopped reporting."""
        return self.exclude(pk__in=self.live(now).values("pk"))


class Replica(models.Model):
    """One serving process: where it listens, since when, and until when its last heartbeat vouches for it."""

    name = models.CharField(max_length=63, unique=True)
    address = models.CharField(max_length=255, blank=True, help_text="host:port it serves HTTP on")
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField()
    expires_at = models.DateTimeField(help_text="gone unless a heartbeat comes before this")
    stopped_at = models.DateTimeField(null=True, blank=True, help_text="set by a clean stop: gone at once")

    objects = ReplicaQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def is_live(self, now: datetime.datetime | None = None) -> bool:
        return self.stopped_at is None and self.expires_at >= (now or timezone.now())


class VersionOnReplica(models.Model):
    """What one replica's engine made of one version: READY, LOADING, FAILED with the reason, ..."""

    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, related_name="versions")
    version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="on_replicas")
    state = models.CharField(max_length=16, choices=VersionState.choices)
    error = models.TextField(blank=True)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["replica__name"]
        constraints = [models.UniqueConstraint(fields=["replica", "version"], name="cluster_one_state_per_replica")]

    def __str__(self) -> str:
        return f"{self.version} on {self.replica}: {self.state}"
