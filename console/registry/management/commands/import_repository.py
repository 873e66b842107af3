"""`manage.py import_repository PATH`: register every model of a Triton repository in the registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.registry.importer import import_repository
from engine.api import InferaError


class Command(BaseCommand):
    help = (
        "Register every model of a Triton-layout repository (<model>/config.pbtxt, <model>/<N>/model.*). "
        "Versions are copied into INFERA_MODEL_STORE unless PATH is the store; versions already registered "
        "are kept. The versions each model's version policy selects load, the newest of them active."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path, help="the repository folder")

    def handle(self, *args: Any, path: Path, **options: Any) -> None:
        if not path.is_dir():
            raise CommandError(f"'{path}' is not a folder")
        try:
            report = import_repository(path, actor="manage.py", log=lambda line: self.stdout.write(f"  {line}"))
        except InferaError as exc:
            raise CommandError(exc.message) from None
        self.stdout.write(
            f"{len(report.registered)} version(s) registered, {len(report.skipped)} skipped, "
            f"{len(report.failed)} failed"
        )
