"""The analysis runner on a real in-process engine: it takes queued analyses, measures, recommends, and stops when
cancelled, out of time or stopped, leaving the served version as it was."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest
from asgiref.sync import sync_to_async

from console.analyzer import services
from console.analyzer.models import Analysis, AnalysisState
from console.analyzer.runner import AnalysisRunner
from console.registry.services import lookups
from engine.serving.analysis import TEMPORARY_VERSION
from tests.console.registry.conftest import SIMPLE_PBTXT
from tests.console.registry.engine_helpers import infer, reconcile_once, register

pytestmark = pytest.mark.django_db(transaction=True)

TWO_CONFIGS = services.AnalysisRequest(
    budget_ms=60_000, max_concurrency=2, max_batch_sizes=[8], queue_delays_us=[0, 200], seconds_per_point=0.05
)


@pytest.fixture
async def served(engine, operator, simple_onnx):
    """simple, version 1 serving in the engine."""
    await register(operator, "simple", [simple_onnx], config=SIMPLE_PBTXT)
    await reconcile_once(engine)
    return engine


@sync_to_async
def start(actor, request: services.AnalysisRequest = TWO_CONFIGS, on_queued=None) -> int:
    return services.start_analysis(actor, lookups.get_model("simple"), request, on_queued=on_queued).pk


@sync_to_async
def row(pk: int) -> Analysis:
    return Analysis.objects.get(pk=pk)


claim = sync_to_async(services.claim_next)


def temporary_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(f"infera-simple-{TEMPORARY_VERSION}-")]


@pytest.fixture
async def first_point(monkeypatch) -> asyncio.Event:
    """Set once the runner has recorded a point."""
    recorded = asyncio.Event()
    loop = asyncio.get_running_loop()
    record = services.record_point

    def recording(pk, point):
        record(pk, point)
        loop.call_soon_threadsafe(recorded.set)

    monkeypatch.setattr(services, "record_point", recording)
    return recorded


@pytest.fixture
async def ended(monkeypatch) -> asyncio.Event:
    """Set once the runner has recorded the end of an analysis."""
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    finish = services.finish

    def finishing(pk, state, error=""):
        finish(pk, state, error)
        loop.call_soon_threadsafe(done.set)

    monkeypatch.setattr(services, "finish", finishing)
    return done


async def test_it_runs_an_analysis_and_recommends_a_config(served, operator):
    pk = await start(operator)
    state = await AnalysisRunner(served).run_job(await claim())
    assert state == AnalysisState.DONE
    analysis = await row(pk)
    assert analysis.state == AnalysisState.DONE and analysis.in_progress is None and analysis.error == ""
    assert [(p["candidate"], p["concurrency"]) for p in analysis.points] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    assert all(p["requests"] > 0 and p["failures"] == 0 for p in analysis.points)
    assert analysis.recommendation["candidate"] in (0, 1) and analysis.recommendation["p99_ms"] <= 60_000
    assert not temporary_threads()
    assert list(served.status("simple").versions) == [1]
    assert (await infer(served)).model_version == 1


async def test_it_takes_an_analysis_it_is_woken_for(served, operator, ended):
    runner = AnalysisRunner(served, period=3600.0)  # only a wake can start it
    runner.start()
    try:
        pk = await start(operator, on_queued=runner.wake)
        await ended.wait()
    finally:
        await runner.stop()
    assert (await row(pk)).state == AnalysisState.DONE


async def test_it_stops_at_once_when_cancelled_in_this_process(served, operator, first_point, ended):
    runner = AnalysisRunner(served, period=3600.0)
    runner.start()
    try:
        pk = await start(operator, dataclasses.replace(TWO_CONFIGS, seconds_per_point=2.0), on_queued=runner.wake)
        await first_point.wait()
        runner.cancel(pk)
        await ended.wait()
    finally:
        await runner.stop()
    analysis = await row(pk)
    assert analysis.state == AnalysisState.CANCELLED
    assert len(analysis.points) < 4 and analysis.recommendation == {}
    assert not temporary_threads()


async def test_it_reads_a_cancellation_asked_for_elsewhere_from_the_database(served, operator, first_point):
    pk = await start(operator, dataclasses.replace(TWO_CONFIGS, seconds_per_point=2.0))
    running = asyncio.ensure_future(AnalysisRunner(served).run_job(await claim()))
    await first_point.wait()
    await sync_to_async(services.cancel_analysis)(operator, await row(pk))  # as another process's API would
    assert await running == AnalysisState.CANCELLED
    assert not temporary_threads()


async def test_it_fails_an_analysis_past_its_time_limit_and_unloads(served, operator):
    pk = await start(operator)
    job = dataclasses.replace(await claim(), max_seconds=0.0)
    assert await AnalysisRunner(served).run_job(job) == AnalysisState.FAILED
    assert (await row(pk)).error == "it ran past its time limit of 0 s"
    assert not temporary_threads()


async def test_it_ends_the_analysis_and_unloads_when_stopped(served, operator, first_point):
    runner = AnalysisRunner(served, period=3600.0)
    runner.start()
    pk = await start(operator, dataclasses.replace(TWO_CONFIGS, seconds_per_point=2.0), on_queued=runner.wake)
    await first_point.wait()
    await runner.stop()
    analysis = await row(pk)
    assert analysis.state == AnalysisState.FAILED and analysis.error == "the server stopped while it ran"
    assert not temporary_threads()
    assert (await infer(served)).model_version == 1


async def test_it_fails_a_version_the_engine_does_not_serve_with_the_engines_reason(engine, operator, simple_onnx):
    await register(operator, "simple", [simple_onnx], config=SIMPLE_PBTXT)
    await reconcile_once(engine)
    pk = await start(operator)
    await engine.unload_model("simple")
    assert await AnalysisRunner(engine).run_job(await claim()) == AnalysisState.FAILED
    assert "simple" in (await row(pk)).error


async def test_it_logs_a_database_outage_once_and_goes_on(engine, monkeypatch, caplog):
    from django.db import OperationalError

    loop = asyncio.get_running_loop()
    tried = asyncio.Event()
    attempts = 0

    def unreachable():
        nonlocal attempts
        attempts += 1
        if attempts == 3:
            loop.call_soon_threadsafe(tried.set)
        raise OperationalError("could not connect to server")

    monkeypatch.setattr(services, "claim_next", unreachable)
    runner = AnalysisRunner(engine, period=0.0)
    runner.start()
    try:
        await tried.wait()
    finally:
        await runner.stop()
    assert runner.database.down and runner.database.failures >= 2  # the third may be cut short by the stop
    assert [r.getMessage() for r in caplog.records].count(
        "the database (analysis runner) is unavailable (OperationalError: could not connect to server); serving goes on"
    ) == 1
