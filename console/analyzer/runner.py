"""The analysis runner: the serving process's loop that takes queued analyses one at a time and runs them on its
engine (engine.serving.analysis.sweep), recording each point as it is measured.

It is the runtime's (console/hosting/runtime.py). It wakes when this process queues an analysis (`wake()`, safe from the
API's worker threads), else every `period` seconds (an analysis queued elsewhere: `manage.py analyze`, another
replica's API). While one runs it beats every WATCH_SECONDS, which is also when it reads a cancellation asked for in
another process; one asked for here (`cancel()`) stops it at once. An analysis ends within its plan's time limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from channels.db import database_sync_to_async

from console.analyzer import services
from console.analyzer.models import AnalysisState
from console.outages import Outage, is_database_outage
from engine.api import InferaError, InferenceServer, LoadPoint, sweep

logger = logging.getLogger("console.analyzer")

DEFAULT_PERIOD_SECONDS = 2.0
WATCH_SECONDS = 0.5


class AnalysisRunner:
    """Runs the queued analyses of the installation, one at a time, on this process's engine."""

    def __init__(self, server: InferenceServer, period: float = DEFAULT_PERIOD_SECONDS) -> None:
        self.server = server
        self.period = period
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._running: tuple[int, asyncio.Event] | None = None  # the analysis running now and its cancel event
        self.database = Outage("the database (analysis runner)")

    # ---- from any thread

    def wake(self) -> None:
        """Look for a queued analysis now."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    def cancel(self, analysis_id: int) -> None:
        """Stop analysis `analysis_id` at once when it runs here."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel_now, analysis_id)

    def _cancel_now(self, analysis_id: int) -> None:
        if self._running is not None and self._running[0] == analysis_id:
            self._running[1].set()

    # ---- on the event loop

    def start(self) -> asyncio.Task[None]:
        """Run the loop as a task (once); it ends with the engine or `stop()`."""
        self._loop = asyncio.get_running_loop()
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self.run(), name="analysis-runner")
        return self._task

    async def stop(self) -> None:
        """Cancel the loop (an analysis running ends FAILED, its temporary version unloaded) and wait for it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        while self.server.is_ready():
            self._wake.clear()
            try:
                job = await database_sync_to_async(services.claim_next)()
                self.database.recovered()
            except Exception as exc:  # the database may be down (logged once): the next period tries again
                if is_database_outage(exc):
                    self.database.failed(exc)
                else:
                    logger.exception("could not look for queued analyses")
                job = None
            if job is not None:
                await self.run_job(job)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)

    async def run_job(self, job: services.Job) -> AnalysisState:
        """Run one claimed analysis to its end and record how it ended."""
        cancelled = asyncio.Event()
        self._running = (job.id, cancelled)
        watcher = asyncio.get_running_loop().create_task(self._watch(job.id, cancelled))
        state, error = AnalysisState.DONE, ""
        logger.info("analysis %s of '%s' version %s: %d configs", job.id, job.model, job.version, len(job.candidates))

        async def record(point: LoadPoint) -> None:
            await database_sync_to_async(services.record_point)(job.id, point.to_dict())

        try:
            async with asyncio.timeout(job.max_seconds):
                await sweep(
                    self.server,
                    job.model,
                    job.version,
                    job.candidates,
                    job.levels,
                    job.seconds,
                    caller=job.caller,
                    sample=job.sample,
                    on_point=record,
                    cancelled=cancelled,
                )
            if cancelled.is_set():
                state = AnalysisState.CANCELLED
        except TimeoutError:
            state, error = AnalysisState.FAILED, f"it ran past its time limit of {job.max_seconds:g} s"
        except InferaError as exc:
            state, error = AnalysisState.FAILED, exc.message
        except asyncio.CancelledError:
            await self._end(job.id, AnalysisState.FAILED, "the server stopped while it ran")
            raise
        except Exception as exc:  # a runtime failure must end the analysis, not the loop
            logger.exception("analysis %s failed", job.id)
            state, error = AnalysisState.FAILED, f"{type(exc).__name__}: {exc}"
        finally:
            watcher.cancel()
            self._running = None
        await self._end(job.id, state, error)
        return state

    async def _end(self, analysis_id: int, state: AnalysisState, error: str) -> None:
        logger.info("analysis %s: %s %s", analysis_id, state, error)
        try:
            await database_sync_to_async(services.finish)(analysis_id, state, error)
        except Exception:  # it stays RUNNING until its heartbeat is stale, then ends FAILED
            logger.exception("analysis %s: its end could not be recorded", analysis_id)

    async def _watch(self, analysis_id: int, cancelled: asyncio.Event) -> None:
        """Beat, and read a cancellation asked for in another process."""
        while not cancelled.is_set():
            try:
                if await database_sync_to_async(services.heartbeat)(analysis_id):
                    cancelled.set()
            except Exception as exc:  # the database may be down: the analysis carries on
                logger.warning("analysis %s: no heartbeat (%s)", analysis_id, exc)
            await asyncio.sleep(WATCH_SECONDS)
