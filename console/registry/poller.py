"""Triton's poll mode: a Triton-layout folder watched, and what changes there applied through the registry.

The Runtime owns one `RepositoryPoller` under model control mode poll (INFERA_MODEL_CONTROL_MODE=poll, the folder
INFERA_MODEL_REPOSITORY, a pass every INFERA_REPOSITORY_POLL_SECS). A pass reads each model folder's fingerprint
(every file's path, size and modification time, as Triton compares times); on the first pass, and afterwards for
each model whose fingerprint changed, it applies the folder as the registry's desired state, audited as the
engine's (the SYSTEM principal):

- new models and version folders are imported (importer.py: copied into the store, registered);
- the versions the model's version policy selects among the folders present serve, the others stop, so a removed
  version folder unloads and one put back loads again; a removed model folder unloads the whole model; when the
  active version stops serving the newest one that serves becomes active;
- a registered version whose files changed is not replaced (a version's files are recorded with their digest and
  never change under it): the change is audited and logged, and a new version folder is how to ship it.

Each changed model then gets a reconciliation pass, so once `poll_once()` returns the engine serves what the folder
says. Tests call `poll_once()` themselves instead of waiting for the timer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from channels.db import database_sync_to_async
from django.db import transaction

from console.audit.models import AuditEvent
from console.registry.importer import import_repository
from console.registry.models import RegisteredModel
from console.registry.services.lookups import switch_active
from console.registry.services.notices import notify_changed
from engine.api import SYSTEM, read_repository

if TYPE_CHECKING:
    from console.registry.reconciler import Reconciler

logger = logging.getLogger("console.registry.poller")

CONFIG_KEY = ""  # a model folder's own files (its config) in its fingerprint; version folders go by their number

Fingerprints = dict[str, dict[str, str]]  # model -> {"" or version number: digest of its files' paths, sizes, times}


class RepositoryPoller:
    """Watches `folder` every `interval` seconds and applies its changes through the registry and the reconciler."""

    def __init__(self, folder: Path, interval: float, reconciler: Reconciler) -> None:
        self.folder = Path(folder)
        self.interval = interval
        self.reconciler = reconciler
        self.seen: Fingerprints | None = None  # the folder as the last pass found it; None before the first
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """One pass now (start-up serves the folder), then one every interval until `stop()`."""
        try:
            await self.poll_once()
        except Exception:  # the database may be down: the periodic pass tries again
            logger.exception("the first pass over '%s' failed; the next one tries again", self.folder)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="repository-poller")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.poll_once()
            except Exception:  # the database may be down, the folder unreadable: the next pass tries again
                logger.exception("a pass over the model repository '%s' failed; the next one tries again", self.folder)

    async def poll_once(self) -> list[str]:
        """Read the folder and apply what changed since the last pass; the models changed, each reconciled."""
        async with self._lock:
            now = await asyncio.to_thread(fingerprints, self.folder)
            changed = sorted(name for name in now.keys() | (self.seen or {}).keys() if _differs(self.seen, now, name))
            if changed:
                await database_sync_to_async(apply_changes)(self.folder, self.seen, now, changed)
                for name in changed:
                    await self.reconciler.reconcile_model(name)
            self.seen = now
            return changed


def _differs(before: Fingerprints | None, now: Fingerprints, name: str) -> bool:
    return before is None or before.get(name) != now.get(name)


def fingerprints(folder: Path) -> Fingerprints:
    """Each model folder's files, in one digest for its own files and one per version folder."""
    found: Fingerprints = {}
    for model_dir in sorted(folder.iterdir()):
        if not model_dir.is_dir() or model_dir.name.startswith("."):
            continue
        parts: dict[str, list[str]] = {CONFIG_KEY: []}
        for child in sorted(model_dir.iterdir()):
            if child.is_dir():
                parts[child.name] = [_stamp(path, child) for path in _files(child)]
            elif child.is_file():
                parts[CONFIG_KEY].append(_stamp(child, model_dir))
        found[model_dir.name] = {key: _digest(rows) for key, rows in parts.items()}
    return found


def _digest(rows: list[str]) -> str:
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _files(folder: Path) -> list[Path]:
    paths = []
    for root, dirs, files in os.walk(folder):  # symbolic links to folders are not followed
        dirs.sort()
        paths += [Path(root) / name for name in sorted(files)]
    return paths


def _stamp(path: Path, base: Path) -> str:
    try:
        info = path.stat()
    except OSError:  # removed while the pass read the folder: the next pass sees it gone
        return f"{path.relative_to(base)} gone"
    return f"{path.relative_to(base)} {info.st_size} {info.st_mtime_ns}"


def apply_changes(folder: Path, before: Fingerprints | None, now: Fingerprints, changed: list[str]) -> None:
    """Import the changed models present, then make each one's serving versions those its folder selects."""
    present = [name for name in changed if name in now]
    if present:
        import_repository(folder, actor=SYSTEM, log=logger.info, models=present)
    found = {model.name: model for model in read_repository(folder) if model.name in present}
    for name in changed:
        selected = found[name].selected if name in found else frozenset()
        altered = _altered_versions(before, now, name)
        _serve_selected(name, folder, selected, altered)


def _altered_versions(before: Fingerprints | None, now: Fingerprints, name: str) -> list[int]:
    old, new = (before or {}).get(name, {}), now.get(name, {})
    return sorted(int(key) for key in new if key.isdigit() and key in old and old[key] != new[key])


def _serve_selected(name: str, folder: Path, selected: frozenset[int], altered: list[int]) -> None:
    with transaction.atomic():
        model = RegisteredModel.objects.select_for_update().filter(name=name).first()
        if model is None:  # never registered (an invalid name, a config that failed): the importer said why
            return
        loads, unloads = [], []
        for version in model.versions.exclude(artifact=""):
            if version.number in selected and not version.should_load:
                version.request_load()
                loads.append(version.number)
            elif version.number not in selected and version.should_load:
                version.request_unload()
                unloads.append(version.number)
        serving = [v for v in model.versions.all() if v.should_load]
        if model.active_number not in selected and serving:
            switch_active(SYSTEM, model, max(serving, key=lambda v: v.number))
        if loads or unloads or altered:
            detail = {"source": folder.name, "loaded": loads, "unloaded": unloads}
            if altered:
                logger.warning(
                    "model '%s': the files of version(s) %s changed in '%s'; a registered version does not change, "
                    "give the change a new version folder",
                    name,
                    altered,
                    folder,
                )
                detail["changed_not_applied"] = altered
            AuditEvent.record(SYSTEM, "repository.poll", name, **detail)
            notify_changed(name)
