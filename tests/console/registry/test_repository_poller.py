"""Poll mode: the RepositoryPoller applies a watched Triton-layout folder through the registry to a real in-process
engine, one explicit pass at a time (no timer decides a test)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async

from console.audit.models import AuditEvent
from console.registry.poller import RepositoryPoller
from engine.api import SYSTEM
from tests.console.registry.engine_helpers import infer, reconciler_for, states
from tests.engine.model_factory import make_simple_onnx

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def watched(tmp_path: Path) -> Path:
    folder = tmp_path / "watched"
    make_simple_onnx(folder, name="simple", version=1)
    return folder


@pytest.fixture
def poller(engine, watched: Path) -> RepositoryPoller:
    return RepositoryPoller(watched, 3600.0, reconciler_for(engine))


async def poll_events(name: str = "simple") -> list[dict]:
    rows = AuditEvent.objects.filter(object=name, action__in=("repository.import", "repository.poll"))
    return await sync_to_async(lambda: [(e.action, e.actor_name, e.detail) for e in rows.order_by("id")])()


async def test_it_serves_the_folder_on_its_first_pass_audited_as_the_engine(engine, poller) -> None:
    assert await poller.poll_once() == ["simple"]
    assert await states("simple") == {1: ("READY", "")}
    assert (await infer(engine)).model_version == 1
    assert [(action, actor) for action, actor, _ in await poll_events()] == [("repository.import", SYSTEM.name)]
    assert await poller.poll_once() == []  # nothing changed on disk: nothing to do


async def test_it_loads_a_new_version_folder_as_the_version_policy_selects(engine, poller, watched) -> None:
    await poller.poll_once()
    make_simple_onnx(watched, name="simple", version=2, write_config=False)
    assert await poller.poll_once() == ["simple"]
    assert await states("simple") == {1: ("UNLOADED", ""), 2: ("READY", "")}  # Triton's default: the latest one
    assert (await infer(engine)).model_version == 2
    assert (await poll_events())[-1][2] == {"source": "watched", "loaded": [], "unloaded": [1]}


async def test_it_unloads_a_removed_version_and_loads_it_again_when_it_is_back(engine, poller, watched) -> None:
    make_simple_onnx(watched, name="simple", version=2, write_config=False)
    await poller.poll_once()
    kept = watched.parent / "kept"
    shutil.move(watched / "simple" / "2", kept)
    await poller.poll_once()
    assert await states("simple") == {1: ("READY", ""), 2: ("UNLOADED", "")}
    assert (await infer(engine)).model_version == 1  # the active version moved to the one that serves
    shutil.move(kept, watched / "simple" / "2")
    await poller.poll_once()
    assert await states("simple") == {1: ("UNLOADED", ""), 2: ("READY", "")}


async def test_it_unloads_a_removed_model_folder(engine, poller, watched) -> None:
    await poller.poll_once()
    shutil.rmtree(watched / "simple")
    assert await poller.poll_once() == ["simple"]
    assert await states("simple") == {1: ("UNLOADED", "")}
    assert not engine.model_ready("simple", 1)


async def test_it_does_not_replace_a_registered_versions_changed_files_and_says_so(engine, poller, watched) -> None:
    await poller.poll_once()
    (watched / "simple" / "1" / "notes.txt").write_text("changed")
    assert await poller.poll_once() == ["simple"]
    assert await states("simple") == {1: ("READY", "")}
    assert (await poll_events())[-1][2]["changed_not_applied"] == [1]


async def test_it_is_started_and_stopped_by_its_owner(engine, poller) -> None:
    await poller.start()  # the first pass is part of starting
    assert await states("simple") == {1: ("READY", "")}
    task = poller._task
    assert task is not None and not task.done()
    await poller.stop()
    assert task.done() and poller._task is None
