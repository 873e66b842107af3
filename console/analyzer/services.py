"""Domain actions on analyses, and what the runner records of one.

Starting one checks it as the engine would run it (each candidate config validated against the server's limits, the
code decision for the caller, the sample inputs against the model) and against the analyzer's own bounds (configs,
concurrency, seconds), so a refusal names its reason before anything loads. One analysis runs at a time on the
installation: a unique `in_progress` slot, taken while it is queued or running. Start, cancel and apply are audited
like every registry change; applying a recommendation is the registry's "new version with this config".
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from console.analyzer.frontier import recommend
from console.analyzer.models import OPEN_STATES, Analysis, AnalysisState
from console.audit.models import AuditEvent
from console.registry.models import ModelVersion, RegisteredModel, VersionState
from console.registry.services import lookups, new_versions, refusals
from engine.api import (
    Candidate,
    CodeRefused,
    InferaError,
    InferenceServer,
    Principal,
    analysis_inputs,
    candidate_config,
    check_code,
    concurrency_levels,
    grid_candidates,
    parse_config_json,
)

MAX_CONFIGS = 8
MAX_CONCURRENCY = 64
MIN_SECONDS_PER_POINT, MAX_SECONDS_PER_POINT = 0.05, 10.0
MAX_PLANNED_SECONDS = 300.0  # configs x concurrency levels x seconds per point
LOAD_SECONDS_PER_CONFIG = 30.0  # loading, warming up and unloading one temporary version, within the time limit
STALE_SECONDS = 60.0  # a running analysis whose process has said nothing this long has stopped with it
QUEUED_SECONDS = 600.0  # a queued analysis no serving process has taken in this time is dropped


@dataclass(frozen=True)
class AnalysisRequest:
    """What someone asks for: the budget, the version (default: the active one), and the sweep."""

    budget_ms: float
    version: int | None = None
    max_concurrency: int = 8
    max_batch_sizes: list[int] = field(default_factory=list)
    queue_delays_us: list[int] = field(default_factory=list)
    instance_counts: list[int] = field(default_factory=list)
    seconds_per_point: float = 1.0
    sample_inputs: dict[str, Any] | None = None


@dataclass(frozen=True)
class Job:
    """An analysis as the runner executes it: plain data, read once from the database."""

    id: int
    model: str
    version: int
    candidates: list[Candidate]
    levels: list[int]
    seconds: float
    max_seconds: float
    caller: Principal
    sample: dict[str, Any] | None


def get_analysis(name: str, pk: int) -> Analysis:
    analysis = Analysis.objects.select_related("model").filter(model__name=name, pk=pk).first()
    if analysis is None:
        lookups.get_model(name)  # 404 for the model first
        raise refusals.NotFound(f"model '{name}' has no analysis {pk}")
    return analysis


def start_analysis(
    actor: Any, model: RegisteredModel, request: AnalysisRequest, on_queued: Callable[[], None] | None = None
) -> Analysis:
    """Queue an analysis once it is checked; `on_queued` runs after the commit (to wake this process's runner)."""
    caller = lookups.caller_of(actor)
    if not caller.may_change_models:
        raise refusals.RegistryError(f"'{caller.name}' may not analyse model '{model.name}'", 403)
    version = _analysed_version(model, request.version)
    plan = _plan(model.name, version, request, caller)
    expire_abandoned()
    try:
        with transaction.atomic():
            analysis = Analysis(
                model=model,
                version=version.number,
                in_progress=True,
                budget_ms=request.budget_ms,
                plan=plan,
                sample_inputs=request.sample_inputs or {},
            )
            analysis.set_requester(actor)
            analysis.save()
            AuditEvent.record(actor, "analysis.start", analysis.label, budget_ms=request.budget_ms, plan=_summary(plan))
            if on_queued is not None:
                transaction.on_commit(on_queued)
    except IntegrityError:
        running = Analysis.objects.select_related("model").filter(in_progress=True).first()
        which = f"analysis {running.pk} of '{running.model.name}'" if running else "another analysis"
        raise refusals.Conflict(f"{which} is still running: analyses run one at a time; cancel it or wait") from None
    return analysis


def _analysed_version(model: RegisteredModel, number: int | None) -> ModelVersion:
    if number is None:
        if model.active_version is None:
            raise refusals.Conflict(f"model '{model.name}' has no active version to analyse")
        version = model.active_version
    else:
        version = lookups.get_version(model.name, number)
    if version.state != VersionState.READY or not version.config:
        raise refusals.Conflict(
            f"version {version.number} of '{model.name}' is {version.state}; only a READY version can be analysed"
        )
    return version


def _plan(name: str, version: ModelVersion, request: AnalysisRequest, caller: Principal) -> dict[str, Any]:
    """The sweep as the runner will run it, refused (400, 403) with the engine's reason or the bound it passes."""
    if not 0 < request.budget_ms:
        raise refusals.RegistryError(f"the latency budget must be more than 0 ms, got {request.budget_ms:g}")
    if not 1 <= request.max_concurrency <= MAX_CONCURRENCY:
        raise refusals.RegistryError(f"max_concurrency must be 1 to {MAX_CONCURRENCY}, got {request.max_concurrency}")
    if not MIN_SECONDS_PER_POINT <= request.seconds_per_point <= MAX_SECONDS_PER_POINT:
        raise refusals.RegistryError(
            f"seconds_per_point must be {MIN_SECONDS_PER_POINT:g} to {MAX_SECONDS_PER_POINT:g}, "
            f"got {request.seconds_per_point:g}"
        )
    base = parse_config_json(version.config)
    engine_settings = settings.INFERA.engine
    try:
        candidates = grid_candidates(base, request.max_batch_sizes, request.queue_delays_us, request.instance_counts)
        if len(candidates) > MAX_CONFIGS:
            raise refusals.RegistryError(
                f"the grid makes {len(candidates)} configs, over the limit of {MAX_CONFIGS}: give fewer values"
            )
        for candidate in candidates:
            check_code(candidate_config(base, candidate, engine_settings.limits), caller, engine_settings)
        analysis_inputs(base, request.sample_inputs)
    except CodeRefused as exc:
        raise refusals.RegistryError(exc.message, 403) from None
    except InferaError as exc:
        raise refusals.RegistryError(exc.message) from None
    levels = concurrency_levels(request.max_concurrency)
    planned = len(candidates) * len(levels) * request.seconds_per_point
    if planned > MAX_PLANNED_SECONDS:
        raise refusals.RegistryError(
            f"the analysis would measure for {planned:g} s ({len(candidates)} configs x {len(levels)} concurrency "
            f"levels x {request.seconds_per_point:g} s), over the limit of {MAX_PLANNED_SECONDS:g} s: give fewer "
            "configs, a lower concurrency or shorter points"
        )
    return {
        "candidates": [{"label": c.label, "override": c.override} for c in candidates],
        "concurrency": levels,
        "seconds_per_point": request.seconds_per_point,
        "max_seconds": planned + LOAD_SECONDS_PER_CONFIG * len(candidates),
    }


def _summary(plan: dict[str, Any]) -> dict[str, Any]:
    return {"configs": [c["label"] for c in plan["candidates"]], "concurrency": plan["concurrency"]}


def cancel_analysis(actor: Any, analysis: Analysis, on_cancel: Callable[[], None] | None = None) -> Analysis:
    """A queued analysis ends now; a running one at its next step (the runner reads the flag, or `on_cancel`)."""
    _check_may_change(actor, analysis)
    with transaction.atomic():
        analysis = Analysis.objects.select_for_update().select_related("model").get(pk=analysis.pk)
        if analysis.state not in OPEN_STATES:
            raise refusals.Conflict(f"analysis {analysis.pk} is {analysis.state}: there is nothing to cancel")
        if analysis.state == AnalysisState.QUEUED:
            analysis.end(AnalysisState.CANCELLED)
        else:
            analysis.cancel_requested = True
            analysis.save(update_fields=["cancel_requested"])
        AuditEvent.record(actor, "analysis.cancel", analysis.label)
        if on_cancel is not None:
            transaction.on_commit(on_cancel)
    return analysis


def apply_analysis(
    actor: Any, analysis: Analysis, candidate: int | None = None, *, server: InferenceServer | None = None
) -> ModelVersion:
    """The recommended config (or candidate `candidate`) as a new version of the analysed files, admitted by `server`
    (lookups.admitting) and made active once it loads. Refused (409) when the analysis is not done, or the model's
    active version is no longer the analysed one.
    """
    _check_may_change(actor, analysis)
    model = lookups.get_model(analysis.model.name)
    if analysis.state != AnalysisState.DONE:
        raise refusals.Conflict(f"analysis {analysis.pk} is {analysis.state}: only a finished one can be applied")
    if candidate is None:
        if not analysis.recommendation:
            raise refusals.Conflict(f"analysis {analysis.pk} recommends no config: {analysis.note}")
        candidate = analysis.recommendation["candidate"]
    candidates = analysis.plan["candidates"]
    if not 0 <= candidate < len(candidates):
        raise refusals.RegistryError(f"analysis {analysis.pk} has configs 0 to {len(candidates) - 1}, not {candidate}")
    if model.active_number != analysis.version:
        raise refusals.Conflict(
            f"the active version of '{model.name}' is {model.active_number}, not the analysed version "
            f"{analysis.version}: analyse it again"
        )
    chosen = candidates[candidate]
    notes = f"analysis {analysis.pk}: {chosen['label']}"
    version = new_versions.add_version_with_config(actor, model, chosen["override"], notes=notes, server=server)
    with transaction.atomic():
        Analysis.objects.filter(pk=analysis.pk).update(applied_version=version.number)
        AuditEvent.record(actor, "analysis.apply", analysis.label, version=version.number, config=chosen["label"])
    return version


def _check_may_change(actor: Any, analysis: Analysis) -> None:
    caller = lookups.caller_of(actor)
    if not caller.may_change_models:
        raise refusals.RegistryError(f"'{caller.name}' may not change analyses of '{analysis.model.name}'", 403)


# ---- the runner's side (console/analyzer/runner.py), each a short transaction


def claim_next() -> Job | None:
    """Take the oldest queued analysis (another process may race for it: the state change decides)."""
    expire_abandoned()
    for analysis in Analysis.objects.select_related("model", "requested_by").filter(state=AnalysisState.QUEUED):
        taken = Analysis.objects.filter(pk=analysis.pk, state=AnalysisState.QUEUED).update(
            state=AnalysisState.RUNNING, started_at=timezone.now(), heartbeat_at=timezone.now()
        )
        if taken:
            plan = analysis.plan
            return Job(
                id=analysis.pk,
                model=analysis.model.name,
                version=analysis.version,
                candidates=[Candidate(c["label"], c["override"]) for c in plan["candidates"]],
                levels=list(plan["concurrency"]),
                seconds=float(plan["seconds_per_point"]),
                max_seconds=float(plan["max_seconds"]),
                caller=lookups.caller_of(analysis.requested_by or analysis.requested_by_name),
                sample=analysis.sample_inputs or None,
            )
    return None


def record_point(pk: int, point: dict[str, Any]) -> None:
    with transaction.atomic():
        analysis = Analysis.objects.select_for_update().get(pk=pk)
        analysis.points = [*analysis.points, point]
        analysis.heartbeat_at = timezone.now()
        analysis.save(update_fields=["points", "heartbeat_at"])


def heartbeat(pk: int) -> bool:
    """The running process is alive; True when someone asked to cancel the analysis."""
    Analysis.objects.filter(pk=pk, state=AnalysisState.RUNNING).update(heartbeat_at=timezone.now())
    return Analysis.objects.filter(pk=pk, cancel_requested=True).exists()


def finish(pk: int, state: AnalysisState, error: str = "") -> None:
    """The analysis is over; a finished one gets its recommendation (or the note why there is none)."""
    with transaction.atomic():
        analysis = Analysis.objects.select_for_update().get(pk=pk)
        recommendation, note = {}, ""
        if state == AnalysisState.DONE:
            recommendation, note = recommend(analysis.points, analysis.plan["candidates"], analysis.budget_ms)
        analysis.end(state, error, recommendation, note)


def expire_abandoned() -> None:
    """End analyses that will never finish: running in a process that stopped, or queued with no process to take it."""
    now = timezone.now()
    stale = Analysis.objects.filter(
        state=AnalysisState.RUNNING, heartbeat_at__lt=now - datetime.timedelta(seconds=STALE_SECONDS)
    )
    for analysis in stale:
        analysis.end(AnalysisState.FAILED, "the serving process running it stopped")
    forgotten = Analysis.objects.filter(
        state=AnalysisState.QUEUED, created_at__lt=now - datetime.timedelta(seconds=QUEUED_SECONDS)
    )
    for analysis in forgotten:
        analysis.end(AnalysisState.FAILED, f"no serving process took it within {QUEUED_SECONDS:g} s")
