"""The model store: a Triton-layout repository (`<model>/config.pbtxt`, `<model>/<N>/...`) written atomically.

New versions are assembled in `<store>/.staging/` (the engine's repository scan skips hidden folders) and moved
into place with one rename, so a reader sees either no version folder or a complete one. Removed folders are
renamed away first and deleted afterwards, for the same reason.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from django.conf import settings

from engine.config import ModelConfig
from engine.config_format import config_to_pbtxt
from engine.repository import CONFIG_FILES, ModelRepository

STAGING = ".staging"
TRASH = ".trash"


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
        return sorted(ModelRepository(self.root).version_paths(name))

    def read_config(self, name: str) -> ModelConfig | None:
        """The model's config file as written, or None when the model has no folder or no config."""
        if not self.model_dir(name).is_dir():
            return None
        return ModelRepository(self.root).read_config(name)

    def config_digest(self, name: str) -> str:
        """A digest of the model's config file bytes (empty when none): tells the reconciler it changed."""
        for file in CONFIG_FILES:
            path = self.model_dir(name) / file
            if path.is_file():
                return hashlib.sha256(path.read_bytes()).hexdigest()
        return ""

    def new_staging(self) -> Path:
        """An empty folder inside the store (same filesystem, so the final rename is atomic)."""
        path = self.root / STAGING / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def commit_version(self, staged: Path, name: str, number: int) -> Path:
        """Move a complete staged version folder to `<name>/<number>` with one rename."""
        target = self.version_dir(name, number)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            raise StoreConflict(f"the store already holds a folder for version {number} of '{name}'")
        os.rename(staged, target)
        return target

    def write_config(self, name: str, config: ModelConfig) -> None:
        """Replace the model's config.pbtxt atomically (a config.json beside it goes, so only one remains)."""
        model_dir = self.model_dir(name)
        model_dir.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=model_dir, prefix=".config-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(config_to_pbtxt(config))
        os.replace(temporary, model_dir / "config.pbtxt")
        (model_dir / "config.json").unlink(missing_ok=True)

    def delete_version(self, name: str, number: int) -> None:
        self._discard(self.version_dir(name, number))

    def delete_model(self, name: str) -> None:
        self._discard(self.model_dir(name))

    def _discard(self, path: Path) -> None:
        if not path.exists():
            return
        trash = self.root / TRASH / uuid.uuid4().hex
        trash.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)


def get_store() -> ModelStore:
    """The store this process serves from (INFERA_MODEL_STORE)."""
    return ModelStore(settings.INFERA_MODEL_STORE)


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
