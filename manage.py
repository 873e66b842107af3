#!/usr/bin/env python
"""Django's command-line utility for Infera (`python manage.py serve` runs everything)."""

from __future__ import annotations

import os
import sys


def main() -> None:
    """Run a management command with Infera's settings; a wrong setting ends it with one clear line."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
    from engine.environment.openmp import prefer_passive_wait

    prefer_passive_wait()  # before anything imports torch: libgomp reads it once
    from django.core.management import execute_from_command_line

    from console.env import EnvError

    try:
        execute_from_command_line(sys.argv)
    except EnvError as exc:
        sys.exit(f"Infera cannot start: {exc}")


if __name__ == "__main__":
    main()
