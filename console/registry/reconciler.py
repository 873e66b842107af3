"""Converge the engine on the database: load what should serve, switch the active version, unload the rest.

It runs in the serving process: once at start-up (a restart recovers every active model), whenever a
"registry.changed" message arrives on the channel layer, and every INFERA_RECONCILE_SECONDS (a lost message
heals). A version that fails to load is marked FAILED with the engine's reason and left out, and the versions
that serve keep serving: the engine swaps only after a load succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from console.registry.desired import ModelPlan, mark_loading, read_plans, record_outcome, signature_of
from console.registry.services import CHANGED, GROUP
from engine.errors import InferaError

if TYPE_CHECKING:
    from engine.server import InferenceServer

logger = logging.getLogger("console.registry.reconciler")

DEFAULT_PERIOD_SECONDS = 10.0
_FAILED_VERSION = re.compile(r"^failed to load '.*?' version (\d+): (.*)$", re.DOTALL)


@dataclass
class _EngineBook:
    """Per engine: one pass at a time, and the plan each model was last loaded with."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    applied: dict[str, tuple] = field(default_factory=dict)


_books: weakref.WeakKeyDictionary[InferenceServer, _EngineBook] = weakref.WeakKeyDictionary()
_tasks: weakref.WeakKeyDictionary[InferenceServer, asyncio.Task[None]] = weakref.WeakKeyDictionary()


def _book(server: InferenceServer) -> _EngineBook:
    if server not in _books:
        _books[server] = _EngineBook()
    return _books[server]


async def reconcile_once(server: InferenceServer) -> None:
    """One full pass over every registered model, plus unloading models that were deleted."""
    book = _book(server)
    async with book.lock:
        plans = await database_sync_to_async(read_plans)()
        for plan in plans:
            await _converge(server, book, plan)
        registered = {plan.name for plan in plans}
        for name in [name for name in book.applied if name not in registered]:
            await _forget(server, book, name)


async def reconcile_model(server: InferenceServer, name: str) -> None:
    """A pass over one model (the v2 repository hooks wait for it)."""
    book = _book(server)
    async with book.lock:
        plans = await database_sync_to_async(read_plans)(name)
        if plans:
            await _converge(server, book, plans[0])
        else:
            await _forget(server, book, name)


def engine_view(server: InferenceServer, name: str, index: list[dict] | None = None) -> tuple[set[int], int | None]:
    """(READY versions, the version taking unversioned requests) of a model in this engine.

    `index` is a repository index already read, for callers that ask about many models at once.
    """
    ready = {
        int(row["version"])
        for row in (server.repository_index() if index is None else index)
        if row["name"] == name and row.get("state") == "READY" and row.get("version")
    }
    try:
        serving = server.get_model(name).version if ready else None
    except InferaError:
        serving = None
    return ready, serving


async def _converge(server: InferenceServer, book: _EngineBook, plan: ModelPlan) -> None:
    name = plan.name
    ready, serving = engine_view(server, name)
    if not plan.versions:
        if ready:
            logger.info("unloading model '%s': no version should serve", name)
            await server.unload_model(name)
        book.applied.pop(name, None)
        await database_sync_to_async(record_outcome)(name, set(), {})
        return
    if ready == set(plan.versions) and book.applied.get(name) == plan.signature:
        if plan.active in ready and serving != plan.active:
            logger.info("model '%s': version %s takes traffic (was %s)", name, plan.active, serving)
            server.set_active_version(name, plan.active)
        await database_sync_to_async(record_outcome)(name, ready, {})
        return
    await database_sync_to_async(mark_loading)(name, set(plan.versions) - ready)
    failed = await _load(server, book, plan, ready, serving)
    ready_now, _ = engine_view(server, name)
    await database_sync_to_async(record_outcome)(name, ready_now, failed)


async def _load(
    server: InferenceServer, book: _EngineBook, plan: ModelPlan, ready: set[int], serving: int | None
) -> dict[int, str]:
    """Load the plan, dropping each version that fails and trying again with the rest; returns the failures."""
    remaining = dict(plan.versions)
    failed: dict[int, str] = {}
    while remaining:
        # a failed active version must not hand traffic to whichever version is newest: keep what serves
        active = plan.active if plan.active in remaining else serving if serving in remaining else None
        try:
            await server.load_model(plan.name, versions=remaining, active_version=active)
        except InferaError as exc:
            match = _FAILED_VERSION.match(exc.message)
            number = int(match.group(1)) if match else None
            if number in remaining:
                logger.warning("%s", exc.message)
                failed[number] = match.group(2)
                del remaining[number]
                continue
            # the model as a whole failed (its config): the engine kept what it served, the rest failed
            logger.warning("%s", exc.message)
            failed.update({n: exc.message for n in remaining if n not in ready})
            return failed
        book.applied[plan.name] = signature_of(remaining, plan.config_digest)
        return failed
    return failed


async def _forget(server: InferenceServer, book: _EngineBook, name: str) -> None:
    """A model deleted from the registry leaves the engine too."""
    book.applied.pop(name, None)
    with contextlib.suppress(InferaError):
        logger.info("unloading model '%s': it is no longer registered", name)
        await server.unload_model(name)


class Reconciler:
    """The loop: a pass, then wait for a change message or the period, until the engine stops."""

    def __init__(self, server: InferenceServer, period: float | None = None) -> None:
        self.server = server
        self.period = period if period is not None else reconcile_period()
        self.wake = asyncio.Event()

    async def run(self) -> None:
        layer = get_channel_layer()
        channel = await layer.new_channel("registry.reconciler.") if layer is not None else None
        listener = asyncio.create_task(self._listen(layer, channel)) if channel else None
        try:
            while self.server.is_ready():
                self.wake.clear()
                if channel:
                    await self._join(layer, channel)
                try:
                    await reconcile_once(self.server)
                except Exception:  # a database or engine hiccup must not end the loop
                    logger.exception("reconciliation failed; the next pass retries")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), self.period)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener
            if channel:
                with contextlib.suppress(Exception):
                    await layer.group_discard(GROUP, channel)

    async def _join(self, layer, channel: str) -> None:
        # renewed every pass: Redis expires group membership
        try:
            await layer.group_add(GROUP, channel)
        except Exception:
            logger.warning("cannot join the channel layer group '%s'; relying on the period", GROUP, exc_info=True)

    async def _listen(self, layer, channel: str) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("channel layer receive failed", exc_info=True)
                await asyncio.sleep(self.period)
                continue
            if message.get("type") == CHANGED:
                self.wake.set()


def reconcile_period() -> float:
    return float(getattr(settings, "INFERA_RECONCILE_SECONDS", DEFAULT_PERIOD_SECONDS))


def start_reconciler(server: InferenceServer, period: float | None = None) -> asyncio.Task[None]:
    """Run the reconciler loop for `server` as a task (one per server); it ends when the server stops."""
    task = _tasks.get(server)
    if task is None or task.done():
        task = asyncio.get_running_loop().create_task(Reconciler(server, period).run(), name="registry-reconciler")
        _tasks[server] = task
    return task


async def stop_reconciler(server: InferenceServer) -> None:
    """Cancel the loop of `server` and wait for it to end."""
    task = _tasks.pop(server, None)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def recover_and_follow(server: InferenceServer) -> None:
    """The engine-started hook: converge once (so start-up ends with the active models in), then keep following."""
    try:
        await reconcile_once(server)
    except Exception:
        logger.exception("the start-up reconciliation failed; the periodic pass retries")
    start_reconciler(server)
