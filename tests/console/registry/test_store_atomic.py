"""The store as another replica reads it while an upload is written: a model appears whole (its config and version
folder) or not at all, and a version folder appears complete.

Every file-system step the upload takes (each rename, folder made, file opened) is observed through Python's audit
hooks, and before each one the store is read the way a replica's engine reads it at start-up
(engine.serving.repository).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.serving.repository import ModelRepository
from tests.console.registry.conftest import SIMPLE_PBTXT, model_file, upload

pytestmark = pytest.mark.django_db

WATCHED_EVENTS = {"os.rename", "os.mkdir", "open", "os.remove", "shutil.rmtree"}
_watch: dict[str, object] = {}


def _look(event: str, _args: tuple) -> None:
    store = _watch.get("store")
    if store is None or event not in WATCHED_EVENTS or _watch.get("busy"):
        return
    _watch["busy"] = True  # reading the store opens files too
    try:
        _watch["seen"].append(what_a_replica_sees(store))  # type: ignore[union-attr]
    finally:
        _watch["busy"] = False


sys.addaudithook(_look)  # hooks cannot be removed: it watches only while a test sets a store


def what_a_replica_sees(store: Path) -> dict[str, tuple[bool, dict[int, tuple[str, ...]]]]:
    """Each model the engine's repository scan finds: whether it has a config, its versions and their files."""
    repository = ModelRepository(store)
    seen = {}
    for name in repository.model_names():
        versions = {
            n: tuple(sorted(p.name for p in path.iterdir())) for n, path in repository.version_paths(name).items()
        }
        has_config = any((store / name / file).is_file() for file in ("config.pbtxt", "config.json"))
        seen[name] = (has_config, versions)
    return seen


def test_it_shows_a_new_model_whole_or_not_at_all(as_operator, store: Path, simple_onnx: bytes):
    assert as_operator.post("/api/models/", {"name": "simple"}, format="json").status_code == 201
    _watch.update(store=store, seen=[])
    try:
        answer = upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT)
    finally:
        _watch["store"] = None
    assert answer.status_code == 201, answer.content
    views = [*_watch["seen"], what_a_replica_sees(store)]  # type: ignore[misc]
    assert views[-1] == {"simple": (True, {1: ("model.onnx",)})}
    for view in views:
        assert view in ({}, views[-1]), f"a replica reading the store saw {view}"


def test_it_adds_a_later_version_complete(as_operator, store: Path, simple_onnx: bytes):
    assert as_operator.post("/api/models/", {"name": "simple"}, format="json").status_code == 201
    assert upload(as_operator, "simple", model_file(simple_onnx), config=SIMPLE_PBTXT).status_code == 201
    _watch.update(store=store, seen=[])
    try:
        answer = upload(as_operator, "simple", model_file(simple_onnx))
    finally:
        _watch["store"] = None
    assert answer.status_code == 201, answer.content
    views = [*_watch["seen"], what_a_replica_sees(store)]  # type: ignore[misc]
    before, after = views[0], views[-1]
    assert after == {"simple": (True, {1: ("model.onnx",), 2: ("model.onnx",)})}
    for view in views:
        assert view in (before, after), f"a replica reading the store saw {view}"
