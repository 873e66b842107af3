"""The model store: a Triton-layout repository (`<model>/config.pbtxt`, `<model>/<N>/...`) written atomically.

New versions are assembled in `<store>/.staging/` (the engine's repository scan skips hidden folders) and moved
into place with one rename, so a reader sees either no version folder or a complete one. Removed folders are
renamed away first and deleted afterwards, for the same reason.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path

from django.conf import settings

from engine.api import CONFIG_FILES, ModelConfig, config_to_pbtxt, read_config_file, version_folders

STAGING = ".staging"
TRASH = ".trash"
ABANDONED_AFTER_SECONDS = 24 * 3600
_HOST = socket.gethostname().replace(".", "-")[:60] or "host"


class StoreConflict(Exception):
    """The store already holds what was about to be written (a folder of the same version)."""


class ModelStore:
    """Paths and atomic writes under one store root."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def model_dir(self, name: str) -> Path:
        return self.root / name

    def version_dir(self, name: str, number: int) -> Path:
        return self.root / name / str(number)

    def relative(self, path: Path) -> str:
        """A store path as the database records it (POSIX, relative to the root)."""
        return Path(path).relative_to(self.root).as_posix()

    def absolute(self, artifact: str) -> Path:
        return self.root / artifact

    def version_numbers(self, name: str) -> list[int]:
        """Numbered version folders of a model on disk (none when the model has no folder)."""
        if not self.model_dir(name).is_dir():
            return []
        return sorted(version_folders(self.model_dir(name)))

    def read_config(self, name: str) -> ModelConfig | None:
        """The model's config file as written, or None when the model has no folder or no config."""
        if not self.model_dir(name).is_dir():
            return None
        return read_config_file(self.model_dir(name))

    def config_digest(self, name: str) -> str:
        """A digest of the model's config file bytes (empty when none): tells the reconciler it changed."""
        for file in CONFIG_FILES:
            path = self.model_dir(name) / file
            if path.is_file():
                return hashlib.sha256(path.read_bytes()).hexdigest()
        return ""

    def new_staging(self) -> Path:
        """An empty folder inside the store (same filesystem, so the final rename is atomic).

        Its name says which host and process made it, so a sweep can tell leftovers of a crash from an upload
        another replica is writing right now.
        """
        path = self.root / STAGING / f"{_HOST}.{os.getpid()}.{uuid.uuid4().hex}"
        path.mkdir(parents=True)
        return path

    def sweep(self, older_than: float = ABANDONED_AFTER_SECONDS) -> list[str]:
        """Remove staging and trash folders a crashed process left: this host's whose process is gone, and any
        older than `older_than` seconds. Returns the names removed."""
        removed = []
        now = time.time()
        for area in (STAGING, TRASH):
            folder = self.root / area
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if _abandoned(entry, now - older_than):
                    shutil.rmtree(entry, ignore_errors=True)
                    removed.append(f"{area}/{entry.name}")
        return removed

    def commit_version(self, staged: Path, name: str, number: int, config: ModelConfig | None = None) -> Path:
        """Move a complete staged version folder to `<name>/<number>` with one rename.

        A model the store has no folder for yet gets its folder in the same rename, with `config` already in it: a
        replica scanning the store sees the new model whole (config and version) or not at all.
        """
        target = self.version_dir(name, number)
        if target.exists():
            raise StoreConflict(f"the store already holds a folder for version {number} of '{name}'")
        if config is not None and not self.model_dir(name).exists():
            holder = self.new_staging()
            (holder / "config.pbtxt").write_text(config_to_pbtxt(config), encoding="utf-8")
            os.rename(staged, holder / str(number))
            try:
                os.rename(holder, self.model_dir(name))  # an empty folder made meanwhile is replaced too
                return target
            except OSError:  # another upload made the model's folder first: add the version to it
                target.parent.mkdir(parents=True, exist_ok=True)
                os.rename(holder / str(number), target)
                shutil.rmtree(holder, ignore_errors=True)
                return target
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, target)
        return target

    def write_config(self, name: str, config: ModelConfig) -> None:
        """Replace the model's config.pbtxt atomically (a config.json beside it goes, so only one remains)."""
        model_dir = self.model_dir(name)
        model_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=model_dir, prefix=".config-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(config_to_pbtxt(config))
            os.replace(temporary, model_dir / "config.pbtxt")
        except BaseException:
            Path(temporary).unlink(missing_ok=True)  # a full disk leaves no half-written config behind
            raise
        (model_dir / "config.json").unlink(missing_ok=True)

    def no_room(self, exc: OSError) -> str:
        """What a write that found no room left (ENOSPC, a quota, a size limit) tells the uploader."""
        usage = shutil.disk_usage(self.root)
        return (
            f"the model store has no room left ({exc.strerror}): {usage.free / 2**20:.1f} MB free of "
            f"{usage.total / 2**20:.0f} MB (INFERA_MODEL_STORE); nothing was stored, free space and retry"
        )

    def delete_version(self, name: str, number: int) -> None:
        self._discard(self.version_dir(name, number))

    def delete_model(self, name: str) -> None:
        self._discard(self.model_dir(name))

    def _discard(self, path: Path) -> None:
        if not path.exists():
            return
        trash = self.root / TRASH / f"{_HOST}.{os.getpid()}.{uuid.uuid4().hex}"
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


def _abandoned(entry: Path, cutoff: float) -> bool:
    try:
        if entry.stat().st_mtime < cutoff:
            return True
    except FileNotFoundError:
        return False
    host, _, rest = entry.name.partition(".")
    pid = rest.partition(".")[0]
    if host != _HOST or not pid.isdigit():
        return False
    return int(pid) != os.getpid() and not _alive(int(pid))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def store_at(root: Path) -> ModelStore:
    """The one ModelStore of a store folder in this process: the Runtime's, and every registry action's."""
    return ModelStore(root)


def get_store() -> ModelStore:
    """The store this process serves from (INFERA_MODEL_STORE), for code with no Runtime at hand (registry actions
    called from views, management commands, tests): the same object as the Runtime's `store`."""
    return store_at(settings.INFERA.model_store)


def folder_digest(folder: Path) -> tuple[str, int]:
    """(sha256, total bytes) of a folder's files: each relative path and content, in sorted order."""
    digest = hashlib.sha256()
    total = 0
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
                total += len(chunk)
    return digest.hexdigest(), total
