"""The running InferenceServer, as Django code sees it: set by the ASGI app, read by views, API and consumers.

Django code never builds its own engine; it asks this module for the one the process serves with. Code that
must act once the engine has started, or before it stops (the reconciler, the metrics sampler), registers a hook
here instead of editing console/asgi.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from engine.errors import Unavailable

if TYPE_CHECKING:
    from engine.server import InferenceServer

StartedHook = Callable[["InferenceServer"], Awaitable[None]]

_server: InferenceServer | None = None
_started_hooks: list[StartedHook] = []
_stopping_hooks: list[StartedHook] = []
_startup_failure: str | None = None


def set_server(server: InferenceServer | None) -> None:
    """Make `server` the one Django code talks to (None when the process stops serving)."""
    global _server
    _server = server


def get_server() -> InferenceServer:
    """The process's InferenceServer; raises Unavailable (503) when this process runs none."""
    if _server is None:
        raise Unavailable("the inference engine is not running in this process")
    return _server


def server_or_none() -> InferenceServer | None:
    """The process's InferenceServer, or None (for pages that show the engine's absence)."""
    return _server


def on_engine_started(hook: StartedHook) -> StartedHook:
    """Register an async callable run with the server once it has started (usable as a decorator)."""
    if hook not in _started_hooks:
        _started_hooks.append(hook)
    return hook


def started_hooks() -> list[StartedHook]:
    """The hooks to run after start-up, in registration order."""
    return list(_started_hooks)


def on_engine_stopping(hook: StartedHook) -> StartedHook:
    """Register an async callable run with the server before it stops (usable as a decorator)."""
    if hook not in _stopping_hooks:
        _stopping_hooks.append(hook)
    return hook


def stopping_hooks() -> list[StartedHook]:
    """The hooks to run before the engine stops, last registered first (the reverse of start-up)."""
    return list(reversed(_stopping_hooks))


def set_startup_failure(reason: str | None) -> None:
    """Record why the engine failed to start (None clears it)."""
    global _startup_failure
    _startup_failure = reason


def startup_failure() -> str | None:
    """Why the engine failed to start, or None."""
    return _startup_failure
