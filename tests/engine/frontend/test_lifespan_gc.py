"""A serving process leaves what its start-up made out of full garbage collections; nothing else freezes."""

from __future__ import annotations

import asyncio
import gc

import pytest

from engine.frontend.lifespan import ServiceLifespan


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
    """The process as the collector had it: whatever a test freezes goes back to the generations."""
    assert gc.get_freeze_count() == 0
    yield
    gc.unfreeze()


def test_it_freezes_what_start_up_made_once_a_serving_start_is_over(unfrozen) -> None:
    made: list[Kept] = []

    async def start() -> None:
        made.append(Kept())

    sent = asyncio.run(_start_up(ServiceLifespan(start, freeze_after_start=True)))
    assert sent[0] == {"type": "lifespan.startup.complete"}
    assert gc.get_freeze_count() > 0
    assert not _tracked(made[0])  # full collections no longer walk it
    assert _tracked(Kept())  # what comes after start-up is collected as usual


def test_it_freezes_nothing_unless_the_process_asks(unfrozen) -> None:
    async def start() -> None:
        pass

    asyncio.run(_start_up(ServiceLifespan(start)))
    assert gc.get_freeze_count() == 0


def test_a_failed_start_freezes_nothing(unfrozen) -> None:
    async def start() -> None:
        raise RuntimeError("no models")

    sent = asyncio.run(_start_up(ServiceLifespan(start, freeze_after_start=True)))
    assert sent[0]["type"] == "lifespan.startup.failed"
    assert gc.get_freeze_count() == 0
