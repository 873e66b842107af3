"""`manage.py analyze MODEL --budget-ms 10`: analyse a model's configs and print the measurements and the
recommendation (and apply it with --apply).

The analysis is queued like one started from the console, and a serving process (`manage.py serve` on the same
database) runs it: its engine serves the model. With --here this process runs it on an engine of its own instead,
loading the analysed version from the model store (for a machine where nothing serves).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.analyzer import services
from console.analyzer.models import OPEN_STATES, Analysis, AnalysisState
from console.analyzer.runner import AnalysisRunner
from console.registry.services import lookups, refusals
from console.registry.store import get_store
from engine.api import InferaError, InferenceServer, parse_config_json

ACTOR = "manage.py analyze"
POLL_SECONDS = 0.5


def numbers(text: str) -> list[int]:
    """'4,8' -> [4, 8]."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"expected whole numbers separated by commas, got '{text}'") from None


class Command(BaseCommand):
    help = (
        "Analyse MODEL: measure a grid of configs (max batch size, queue delay, instance count) at concurrency "
        "1, 2, 4 ... on temporary versions that serve no traffic, and recommend the config with the most throughput "
        "whose p99 latency stays within --budget-ms."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model")
        parser.add_argument("--budget-ms", type=float, required=True, help="the p99 latency budget in milliseconds")
        parser.add_argument(
            "--model-version", type=int, default=None, help="the version to analyse (default: the active one)"
        )
        parser.add_argument("--concurrency", type=int, default=8, help="the highest concurrency (default 8)")
        parser.add_argument("--max-batch-size", type=numbers, default=[], help="e.g. 4,8 (default: the version's)")
        parser.add_argument("--queue-delay-us", type=numbers, default=[], help="e.g. 0,500 (default: the version's)")
        parser.add_argument("--instances", type=numbers, default=[], help="e.g. 1,2 (default: the version's)")
        parser.add_argument("--seconds", type=float, default=1.0, help="seconds per config and concurrency")
        parser.add_argument("--apply", action="store_true", help="apply the recommendation as a new version")
        parser.add_argument("--here", action="store_true", help="run it in this process, on an engine of its own")
        parser.add_argument(
            "--pickup-seconds", type=float, default=30.0, help="how long to wait for a serving process to take it"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        request = services.AnalysisRequest(
            budget_ms=options["budget_ms"],
            version=options["model_version"],
            max_concurrency=options["concurrency"],
            max_batch_sizes=options["max_batch_size"],
            queue_delays_us=options["queue_delay_us"],
            instance_counts=options["instances"],
            seconds_per_point=options["seconds"],
        )
        try:
            analysis = services.start_analysis(ACTOR, lookups.get_model(options["model"]), request)
        except refusals.RegistryError as exc:
            raise CommandError(exc.message) from None
        plan = analysis.plan
        self.stdout.write(
            f"Analysis {analysis.pk} of '{analysis.model.name}' version {analysis.version}: "
            f"{len(plan['candidates'])} configs x concurrency {plan['concurrency']}, "
            f"{plan['seconds_per_point']:g} s each (at most {plan['max_seconds']:g} s)"
        )
        if options["here"]:
            asyncio.run(run_here(analysis))
            analysis.refresh_from_db()
            for point in analysis.points:
                self.stdout.write("  " + line(analysis, point))
        else:
            self.wait(analysis, options["pickup_seconds"])
            analysis.refresh_from_db()
        self.report(analysis)
        if options["apply"]:
            self.apply(analysis)

    def wait(self, analysis: Analysis, pickup_seconds: float) -> None:
        """Follow it to its end, a line per point; give up if no serving process takes it in time."""
        deadline = time.monotonic() + pickup_seconds
        shown = 0
        while True:
            analysis.refresh_from_db()
            for point in analysis.points[shown:]:
                self.stdout.write("  " + line(analysis, point))
            shown = len(analysis.points)
            if analysis.state not in OPEN_STATES:
                return
            if analysis.state == AnalysisState.QUEUED and time.monotonic() > deadline:
                services.cancel_analysis(ACTOR, analysis)
                raise CommandError(
                    f"no serving process took analysis {analysis.pk} within {pickup_seconds:g} s (is `manage.py "
                    "serve` running on this database?); it is cancelled. Run it here with --here."
                )
            time.sleep(POLL_SECONDS)

    def report(self, analysis: Analysis) -> None:
        if analysis.state != AnalysisState.DONE:
            raise CommandError(f"analysis {analysis.pk} is {analysis.state}: {analysis.error or 'no reason given'}")
        recommendation = analysis.recommendation
        if not recommendation:
            self.stdout.write(f"No recommendation: {analysis.note}")
            return
        self.stdout.write(
            f"Recommended (p99 within {analysis.budget_ms:g} ms): {recommendation['label']}: "
            f"{recommendation['throughput']:.1f} infer/s at concurrency {recommendation['concurrency']}, "
            f"p99 {recommendation['p99_ms']:.2f} ms"
        )

    def apply(self, analysis: Analysis) -> None:
        try:
            version = services.apply_analysis(ACTOR, analysis)
        except refusals.RegistryError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(f"Applied as version {version.number} of '{analysis.model.name}' (active once READY)")


def line(analysis: Analysis, point: dict[str, Any]) -> str:
    label = analysis.plan["candidates"][point["candidate"]]["label"]
    p99 = f"{point['p99_ms']:.2f} ms" if point["p99_ms"] is not None else "–"
    failed = f", {point['failures']} failed ({point['error']})" if point["failures"] else ""
    return f"{label}, concurrency {point['concurrency']}: {point['throughput']:.1f} infer/s, p99 {p99}{failed}"


async def run_here(analysis: Analysis) -> None:
    """Serve the analysed version on an engine of this process's own, and run the analysis on it."""
    job = await database_sync_to_async(services.claim_next)()
    if job is None or job.id != analysis.pk:
        raise CommandError(f"analysis {analysis.pk} was taken by a serving process; follow it in the console")
    version = await database_sync_to_async(lookups.get_version)(analysis.model.name, analysis.version)
    server = InferenceServer(settings.INFERA.model_store, settings=settings.INFERA.engine)
    await server.start(load_models=False)
    try:
        try:
            await server.load_model(
                version.model.name,
                versions={version.number: get_store().absolute(version.artifact)},
                version_configs={version.number: parse_config_json(version.config)},
                active_version=version.number,
            )
        except InferaError as exc:
            await database_sync_to_async(services.finish)(job.id, AnalysisState.FAILED, exc.message)
            return
        await AnalysisRunner(server).run_job(job)
    finally:
        await server.stop()
