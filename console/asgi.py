"""The ASGI entry point: `console.asgi:application` for uvicorn and daphne (see console/hosting/composition.py).

`manage.py serve` builds its own application with the address it listens on; this module is for running the
console under an ASGI server directly (`uvicorn console.asgi:application`).
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

from engine.api import prefer_passive_wait  # noqa: E402 - engine.api loads no torch

prefer_passive_wait()  # before anything imports torch: libgomp reads it once

import django  # noqa: E402

django.setup(set_prefix=False)

from django.conf import settings  # noqa: E402

from console.hosting.composition import build_application  # noqa: E402

application = build_application(settings.INFERA)
