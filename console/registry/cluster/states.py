"""Each version's state on each replica, written by that replica's reconciler, and what they add up to.

A replica records only what its own engine made of a version (console/registry/desired.py calls in here within its
transaction); the registry's version state is then the summary over the live replicas (ModelVersion.
take_replica_states), so a version READY on two replicas and FAILED on a third is READY, and the page says so.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from console.registry.cluster.models import FORGOTTEN_AFTER, GONE_AFTER_BEATS, Replica, VersionOnReplica
from console.registry.models import ModelVersion, VersionState, engine_transition


def beat(
    name: str,
    address: str,
    interval: float,
    started_at: datetime.datetime,
    former: Callable[[str], bool] = lambda name: False,
) -> Replica:
    """Renew this replica's row (live for GONE_AFTER_BEATS intervals) and forget replicas gone for long, and at once
    those gone under a name `former` says this replica's processes no longer have (the replica alone before it ran
    workers, the workers before it ran alone): a ghost that would stay listed as gone for FORGOTTEN_AFTER."""
    now = timezone.now()
    replica, _ = Replica.objects.update_or_create(
        name=name,
        defaults={
            "address": address,
            "started_at": started_at,
            "last_seen": now,
            "expires_at": now + datetime.timedelta(seconds=interval * GONE_AFTER_BEATS),
            "stopped_at": None,
        },
    )
    forgotten = now - FORGOTTEN_AFTER
    Replica.objects.filter(Q(expires_at__lt=forgotten) | Q(stopped_at__lt=forgotten)).delete()
    replaced = [pk for pk, gone in Replica.objects.gone(now).values_list("pk", "name") if former(gone)]
    if replaced:
        Replica.objects.filter(pk__in=replaced).delete()
    return replica


def mark_stopped(name: str) -> None:
    """A clean stop: the replica is gone at once, its states no longer counted."""
    Replica.objects.filter(name=name).update(stopped_at=timezone.now())


def _replica(name: str) -> Replica:
    """This replica's row, made if its heartbeat has not written it yet (the database was down at start)."""
    now = timezone.now()
    replica, _ = Replica.objects.get_or_create(
        name=name, defaults={"started_at": now, "last_seen": now, "expires_at": now}
    )
    return replica


def record(replica: str, versions: list[ModelVersion], ready: set[int], failed: dict[int, str]) -> None:
    """Within the caller's transaction (rows of `versions` locked): what this replica's engine made of each version
    of one model, then each version's state across the live replicas."""
    here = _replica(replica)
    rows = {row.version_id: row for row in VersionOnReplica.objects.filter(replica=here, version__in=versions)}
    for version in versions:
        row = rows.get(version.pk)
        if row is None:
            if version.number not in ready and version.number not in failed:
                continue  # never tried here: nothing to say
            row = VersionOnReplica(replica=here, version=version, state=VersionState.PENDING)
        change = engine_transition(row.state, version.should_load, version.number in ready, failed.get(version.number))
        if change is not None and (change != (row.state, row.error) or row.pk is None):
            row.state, row.error = change
            row.save()
        elif row.pk is None:
            row.save()
    summarise(versions, here)


def mark_loading(replica: str, versions: list[ModelVersion]) -> None:
    """Within the caller's transaction: these versions are loading on this replica."""
    here = _replica(replica)
    for version in versions:
        VersionOnReplica.objects.update_or_create(
            replica=here, version=version, defaults={"state": VersionState.LOADING, "error": ""}
        )
    summarise(versions, here)


def summarise(versions: list[ModelVersion], here: Replica) -> None:
    """Each version's registry state from the states the live replicas (this one among them) report."""
    live = {here.pk, *Replica.objects.live().values_list("pk", flat=True)}
    states: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for version_id, state, error in VersionOnReplica.objects.filter(version__in=versions, replica__in=live).values_list(
        "version_id", "state", "error"
    ):
        states[version_id].append((state, error))
    for version in versions:
        version.take_replica_states(states.get(version.pk, []))


def failed_here(replica: str, versions: Iterable[ModelVersion]) -> set[int]:
    """The ids of those versions that failed on this replica (its reconciler leaves them out until a retry)."""
    return set(
        VersionOnReplica.objects.filter(
            replica__name=replica, version__in=list(versions), state=VersionState.FAILED
        ).values_list("version_id", flat=True)
    )


def tried_anywhere(versions: Iterable[ModelVersion]) -> set[int]:
    """The ids of those versions some replica has a state for."""
    return set(VersionOnReplica.objects.filter(version__in=list(versions)).values_list("version_id", flat=True))


@dataclass(frozen=True)
class ReplicaState:
    """One replica's state of one version, as the API and pages show it."""

    replica: str
    state: str
    error: str
    live: bool


@dataclass(frozen=True)
class ReplicaStates:
    """The replicas of this database (live and gone) and each version's states on them, read once per page."""

    live: tuple[str, ...]
    gone: tuple[Replica, ...]
    states: dict[int, tuple[ReplicaState, ...]]  # version id -> states on live and gone replicas

    @classmethod
    def read(cls) -> ReplicaStates:
        """Every replica and every version's states on them (one query each)."""
        now = timezone.now()
        replicas = list(Replica.objects.all())
        live = {r.pk for r in replicas if r.is_live(now)}
        states: dict[int, list[ReplicaState]] = defaultdict(list)
        for row in VersionOnReplica.objects.select_related("replica"):
            states[row.version_id].append(ReplicaState(row.replica.name, row.state, row.error, row.replica_id in live))
        return cls(
            tuple(r.name for r in replicas if r.pk in live),
            tuple(r for r in replicas if r.pk not in live),
            {key: tuple(value) for key, value in states.items()},
        )

    @property
    def is_cluster(self) -> bool:
        """More than one replica known: only then are states shown per replica."""
        return len(self.live) + len(self.gone) > 1

    def of_version(self, version: ModelVersion) -> tuple[ReplicaState, ...]:
        return self.states.get(version.pk, ())

    def summary(self, version: ModelVersion) -> str:
        """'READY on 3/3', 'READY on 2/3 · FAILED on 1: <reason>', ...; empty for a single replica."""
        if not self.is_cluster:
            return ""
        counted = [s for s in self.of_version(version) if s.live]
        parts = []
        for state in (VersionState.READY, VersionState.LOADING, VersionState.PENDING, VersionState.FAILED):
            on = [s for s in counted if s.state == state]
            if not on:
                continue
            part = f"{state} on {len(on)}" + (f"/{len(self.live)}" if state == VersionState.READY else "")
            if state == VersionState.FAILED:
                part += f": {on[0].error}"
            parts.append(part)
        if not parts:
            parts.append(f"on none of {len(self.live)}")
        return " · ".join(parts)
