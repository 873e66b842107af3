"""A serving process leaves what its start-up made out of full garbage collections and shortens the GIL switch
interval; nothing else does either."""

from __future__ import annotations

import asyncio
import gc
import sys

import pytest

from engine.frontend.lifespan import SERVING_SWITCH_INTERVAL_S, ServiceLifespan


class Kept:
    """Something start-up makes and keeps (as the loaded models are)."""


async def _start_up(lifespan: ServiceLifespan) -> list[dict]:
    """Run an ASGI lifespan start-up through `lifespan.handle`, then its shutdown; the messages it sent."""
    inbox: asyncio.Queue[dict] = asyncio.Queue()
    sent: list[dict] = []
    await inbox.put({"type": "lifespan.startup"})

    async def send(message: dict) -> None:
        sent.append(message)
        if message["type"] != "lifespan.shutdown.complete":
            await inbox.put({"type": "lifespan.shutdown"})

    await lifespan.handle(inbox.get, send)
    return sent


def _tracked(thing: object) -> bool:
    """Whether the collector's generations (the frozen one excluded) hold `thing`."""
    return any(candidate is thing for candidate in gc.get_objects())


@pytest.fixture
def unfrozen():
    """The process as the collector and the interpreter had it: whatever a test freezes goes back to the
    generations, the switch interval back to what it was."""
    assert gc.get_freeze_count() == 0
    interval = sys.getswitchinterval()
    yield
    gc.unfreeze()
    sys.setswitchinterval(interval)


def test_it_freezes_what_start_up_made_once_a_serving_start_is_over(unfrozen) -> None:
    made: list[Kept] = []

    async def start() -> None:
        made.append(Kept())

    sent = asyncio.run(_start_up(ServiceLifespan(start, serving_process=True)))
    assert sent[0] == {"type": "lifespan.startup.complete"}
    assert gc.get_freeze_count() > 0
    assert not _tracked(made[0])  # full collections no longer walk it
    assert _tracked(Kept())  # what comes after start-up is collected as usual
    assert sys.getswitchinterval() == pytest.approx(SERVING_SWITCH_INTERVAL_S)


def test_it_freezes_nothing_unless_the_process_asks(unfrozen) -> None:
    async def start() -> None:
        pass

    interval = sys.getswitchinterval()
    asyncio.run(_start_up(ServiceLifespan(start)))
    assert gc.get_freeze_count() == 0
    assert sys.getswitchinterval() == interval


def test_a_failed_start_freezes_nothing(unfrozen) -> None:
    async def start() -> None:
        raise RuntimeError("no models")

    sent = asyncio.run(_start_up(ServiceLifespan(start, serving_process=True)))
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert gc.get_freeze_count() == 0
