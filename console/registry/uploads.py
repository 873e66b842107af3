"""Uploaded model versions: checked and staged before anything reaches the store.

`UploadRejected` (4xx, nothing recorded) covers what is wrong with the request itself: the size, the file type, an
unsafe archive, a config that does not parse, a version folder with no model file (only an ensemble's may have none).
What the engine finds afterwards (the version runs code its uploader may not load, a config that fails validation
or contradicts the model, a file its runtime cannot load) is decided by engine.serving.admission, called from services.

An archive of several model folders stages one version of each: the folder named after the model uploaded to is its
version, the others come along as companions (an ensemble with the models its steps call, say).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from console.registry import archives
from console.registry.pipeline import ENSEMBLE
from console.registry.store import ModelStore, folder_digest
from engine.api import (
    CONFIG_FILES,
    MODEL_FILES,
    InferaError,
    ModelConfig,
    holds_hf_folder,
    load_json,
    model_name_problem,
    parse_config_json,
    parse_config_pbtxt,
)

# a single uploaded model file, by suffix -> the name it takes in the version folder
MODEL_FILES_BY_SUFFIX = {Path(name).suffix: name for name in MODEL_FILES}
MAX_CONFIG_BYTES = 1024 * 1024
MODEL_FILE_NAMES = ", ".join(MODEL_FILES)
HF_FOLDER = "a Hugging Face folder (config.json and *.safetensors)"
# folders inside a staging root; a leading '.' keeps them apart from model names (`<root>/<name>/<number>`)
STAGED_VERSION = ".version"
UNPACKED = ".unpacked"
COMPANIONS = ".companions"


class UploadRejected(Exception):
    """The upload is refused before anything is stored; `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def max_upload_bytes() -> int:
    return settings.INFERA.max_upload_bytes


def max_unpacked_bytes() -> int:
    """Archives may unpack to this much (INFERA_MAX_UNPACKED_MB, default four times the upload limit)."""
    return settings.INFERA.max_unpacked_mb * 1024 * 1024


def max_archive_members() -> int:
    return settings.INFERA.max_archive_members


def too_large(size: int) -> UploadRejected:
    limit = settings.INFERA.max_upload_mb
    return UploadRejected(
        f"the upload is {size / (1024 * 1024):.1f} MB, over the limit of {limit} MB (INFERA_MAX_UPLOAD_MB)", 413
    )


@dataclass
class StagedUpload:
    """An upload unpacked inside the store's staging area: its version folder and what came with it."""

    root: Path
    version_dir: Path
    sha256: str
    size: int
    config: ModelConfig | None = None
    notes: list[str] = field(default_factory=list)
    # the other model folders of an archive of several, by model name, each staged under `root`
    companions: dict[str, StagedUpload] = field(default_factory=dict)

    def assign_number(self, name: str, number: int) -> None:
        """Rename the staged folder to `<name>/<number>`, the name the backend and its messages will see."""
        target = self.root / name / str(number)
        target.parent.mkdir(parents=True, exist_ok=True)
        self.version_dir = self.version_dir.rename(target)

    def cleanup(self) -> None:
        for part in self.companions.values():
            part.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)


def parse_config_text(data: bytes | str, filename: str = "") -> ModelConfig:
    """A config sent as config.pbtxt text or its JSON form (told apart by the file name, else by a leading '{')."""
    if isinstance(data, bytes):
        if len(data) > MAX_CONFIG_BYTES:
            raise UploadRejected(f"the config is over {MAX_CONFIG_BYTES // 1024} KB")
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UploadRejected(f"the config is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    source = filename or "config"
    as_json = filename.lower().endswith(".json") or (not filename and data.lstrip().startswith("{"))
    try:
        if as_json:
            document: Any = load_json(data, source)  # nested at most MAX_JSON_DEPTH levels
            if not isinstance(document, dict):
                raise UploadRejected(f"{source}: a JSON config must be an object")
            return parse_config_json(document, source=source)
        return parse_config_pbtxt(data, source=source)
    except InferaError as exc:
        raise UploadRejected(exc.message) from None


def stage_upload(
    store: ModelStore,
    upload: UploadedFile,
    config: ModelConfig | None,
    name: str,
    base_config_of: Callable[[str], ModelConfig | None],
) -> StagedUpload:
    """Check the upload's size and type, unpack it safely into staging, find its version folder(s) and config.

    `config` is the one sent with the upload, for model `name`; `base_config_of(model)` is a model's current one
    (used when none is sent or packed).
    """
    if upload.size is not None and upload.size > max_upload_bytes():
        raise too_large(upload.size)
    filename = Path(upload.name or "").name
    kind = archives.archive_kind(filename)
    single = MODEL_FILES_BY_SUFFIX.get(Path(filename).suffix.lower())
    if kind is None and single is None:
        raise UploadRejected(
            f"'{filename}' is neither a model file ({MODEL_FILE_NAMES}) nor an archive (.zip, .tar.gz) of a "
            "version folder or of several model folders"
        )
    root = store.new_staging()
    try:
        staged = _unpack(upload, root, kind, single, name)
        if config is None:
            config = staged.config
        elif staged.config is not None:
            staged.notes.append("the config inside the archive was ignored: a config was sent with the upload")
        staged.config = config
        _check_model_file(staged.version_dir, config or base_config_of(name))
        for companion, part in staged.companions.items():
            _check_model_file(part.version_dir, part.config or base_config_of(companion), f"model folder '{companion}'")
        return staged
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


def stage_without_file(store: ModelStore, config: ModelConfig | None, base_config: ModelConfig | None) -> StagedUpload:
    """A version folder with no file in it, for an ensemble: its config (sent, else the current one) is all it is."""
    if not is_ensemble(config or base_config):
        raise UploadRejected(
            f"send a model file ({MODEL_FILE_NAMES}) or an archive of a version folder: only an ensemble "
            '(platform: "ensemble") has versions without one'
        )
    root = store.new_staging()
    version_dir = root / STAGED_VERSION
    version_dir.mkdir()
    staged = staged_folder(root, version_dir)
    staged.config = config
    return staged


def is_ensemble(config: ModelConfig | None) -> bool:
    """The config is an ensemble's, whose version folders hold no model file."""
    return config is not None and config.backend_name == ENSEMBLE


def _unpack(upload: UploadedFile, root: Path, kind: str | None, single: str | None, name: str) -> StagedUpload:
    digest = hashlib.sha256()
    size = 0
    if kind is None:
        version_dir = root / STAGED_VERSION
        version_dir.mkdir()
        with (version_dir / str(single)).open("xb") as out:
            for chunk in upload.chunks():
                digest.update(chunk)
                size += len(chunk)
                if size > max_upload_bytes():
                    raise too_large(size)
                out.write(chunk)
        return StagedUpload(root, version_dir, digest.hexdigest(), size)
    for chunk in upload.chunks():
        digest.update(chunk)
        size += len(chunk)
    if size > max_upload_bytes():
        raise too_large(size)
    upload.seek(0)
    unpacked = root / UNPACKED
    unpacked.mkdir()
    try:
        archives.unpack(upload.file, kind, unpacked, max_members=max_archive_members(), max_bytes=max_unpacked_bytes())
    except archives.ArchiveRejected as exc:
        raise UploadRejected(f"archive '{Path(upload.name or '').name}': {exc}") from None
    if not any(unpacked.iterdir()):
        raise UploadRejected("the archive is empty")
    models = archives.model_folders_of(unpacked)
    if models:
        staged = _stage_models(root, models, name)
    else:
        version_dir = archives.version_folder_of(unpacked)
        config = _take_config(version_dir, version_dir.parent if version_dir != unpacked else None)
        staged_version = root / STAGED_VERSION
        staged_version.mkdir()
        archives.move_contents(version_dir, staged_version)
        staged = StagedUpload(root, staged_version, digest.hexdigest(), size, config=config)
    shutil.rmtree(unpacked)
    return staged


def _stage_models(root: Path, models: dict[str, Path], name: str) -> StagedUpload:
    """One version of each model folder: `name`'s as the upload, the others as its companions.

    Each version's digest is of its own folder (the archive's would say nothing about one version of it).
    """
    if name not in models:
        raise UploadRejected(
            f"the archive holds the model folders {', '.join(models)}, and none named '{name}' (the model this "
            "upload is for)"
        )
    for folder_name in models:
        if problem := model_name_problem(folder_name):
            raise UploadRejected(f"model folder '{folder_name}': {problem}")
    staged: dict[str, StagedUpload] = {}
    for model_name, model_dir in models.items():
        numbered = sorted(int(entry.name) for entry in model_dir.iterdir() if entry.is_dir() and entry.name.isdigit())
        if len(numbered) > 1:
            raise UploadRejected(
                f"model folder '{model_name}' holds versions {', '.join(map(str, numbered))}; an upload adds one "
                "version of each model: keep one"
            )
        version_dir = model_dir / str(numbered[0]) if numbered else model_dir / STAGED_VERSION
        version_dir.mkdir(exist_ok=True)
        config = _take_config(version_dir, model_dir)
        part_root = root if model_name == name else root / COMPANIONS / model_name
        target = part_root / STAGED_VERSION
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(version_dir), str(target))
        part = staged_folder(part_root, target)
        part.config = config
        staged[model_name] = part
    upload = staged.pop(name)
    upload.companions = staged
    return upload


def _take_config(version_dir: Path, model_dir: Path | None) -> ModelConfig | None:
    """A config.pbtxt/config.json packed beside the model files or in the enclosing model folder, removed.

    A Hugging Face folder's own config.json (beside its *.safetensors) is the model's, not a Triton config: it stays.
    """
    found = [folder / name for folder in (version_dir, model_dir) if folder for name in CONFIG_FILES]
    found = [path for path in found if path.is_file()]
    if _holds_models_own_config(version_dir):
        found = [path for path in found if path != version_dir / "config.json"]
    if not found:
        return None
    if len(found) > 1:
        raise UploadRejected("the archive holds more than one config file; keep one")
    config = parse_config_text(found[0].read_bytes(), found[0].name)
    found[0].unlink()
    return config


def _holds_models_own_config(version_dir: Path) -> bool:
    """The version folder's config.json is a Hugging Face model's (*.safetensors beside it, or its model_type)."""
    path = version_dir / "config.json"
    if not path.is_file():
        return False
    if holds_hf_folder(version_dir):
        return True
    try:
        document = load_json(path.read_bytes()[:MAX_CONFIG_BYTES].decode("utf-8"), path.name)
    except (InferaError, UnicodeDecodeError):
        return False  # not a Hugging Face config either: parsed as a Triton config, which names the problem
    return isinstance(document, dict) and "model_type" in document


def _check_model_file(version_dir: Path, config: ModelConfig | None, subject: str = "the upload") -> None:
    """The version folder holds its model file (the config's default_model_filename, else one of MODEL_FILES, else
    a Hugging Face folder's files); an ensemble's needs none."""
    if is_ensemble(config):
        return
    wanted = config.default_model_filename if config is not None and config.default_model_filename else None
    present = sorted(p.name for p in version_dir.iterdir())
    if wanted:
        if not (version_dir / wanted).exists():
            raise UploadRejected(f"{subject} holds no '{wanted}' (the config's default_model_filename)")
        return
    if not any((version_dir / name).exists() for name in MODEL_FILES) and not holds_hf_folder(version_dir):
        shown = ", ".join(present[:10]) or "nothing"
        raise UploadRejected(
            f"{subject} holds none of {MODEL_FILE_NAMES} (it holds: {shown}) nor {HF_FOLDER}; only an ensemble "
            '(platform: "ensemble") may hold no model file'
        )


def staged_folder(root: Path, version_dir: Path) -> StagedUpload:
    """A version folder already laid out in staging (files sent through /v2, a copy of another version)."""
    sha256, size = folder_digest(version_dir)
    return StagedUpload(root, version_dir, sha256, size)
