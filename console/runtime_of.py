"""How the console's views, API and consumers reach this process's Runtime: from the connection's scope.

A leaf: it imports nothing of the console, so every package may use it. The Runtime itself is
console/hosting/runtime.py's; the ASGI application (console/hosting/composition.py) puts it in each scope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RUNTIME_KEY = "infera.runtime"


def runtime_of(source: Any) -> Any:
    """The Runtime of a request (Django or DRF), a consumer's scope, or a scope; None outside a serving process."""
    request = getattr(source, "_request", source)  # a DRF Request wraps Django's
    scope = getattr(request, "scope", request)
    if isinstance(scope, Mapping):
        return scope.get(RUNTIME_KEY)
    return None
