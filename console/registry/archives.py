"""Unpack an uploaded .zip or .tar(.gz) of a version folder (or of several model folders), refusing anything that
could escape or explode.

Members are checked one by one and written by hand (never `extractall`): no absolute paths, no `..`, no links,
no devices or pipes, at most `max_members` entries and `max_bytes` unpacked bytes, counted as they are written
so a lying header cannot slip past.
"""

from __future__ import annotations

import functools
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from console.outages import is_storage_full
from engine.api import CONFIG_FILES, MODEL_FILES

ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
MODEL_AND_CONFIG_FILES = frozenset((*MODEL_FILES, *CONFIG_FILES))
# folders macOS adds to zips it makes; never part of a model
IGNORED_TOP_FOLDERS = ("__MACOSX",)


class ArchiveRejected(Exception):
    """The archive is unsafe or unreadable; the message says which member and why."""


def archive_kind(filename: str) -> str | None:
    """'zip' or 'tar' from the file name, None when it is not an archive."""
    lowered = filename.lower()
    if lowered.endswith(".zip"):
        return "zip"
    if lowered.endswith((".tar.gz", ".tgz", ".tar")):
        return "tar"
    return None


def member_path(name: str) -> PurePosixPath | None:
    """The safe relative path of a member, None for entries to skip; ArchiveRejected for unsafe names."""
    if "\0" in name:
        raise ArchiveRejected(f"member {name!r} has a NUL character in its name")
    if "\\" in name:
        raise ArchiveRejected(f"member '{name}' uses '\\' in its path; archives must use '/'")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveRejected(f"member '{name}' has an absolute path")
    parts = [part for part in PurePosixPath(name).parts if part != "."]
    if ".." in parts:
        raise ArchiveRejected(f"member '{name}' climbs out of the archive with '..'")
    if not parts or parts[0] in IGNORED_TOP_FOLDERS:
        return None
    return PurePosixPath(*parts)


class _Budget:
    """Counts members and bytes written, refusing past the limits."""

    def __init__(self, max_members: int, max_bytes: int) -> None:
        self.max_members = max_members
        self.max_bytes = max_bytes
        self.members = 0
        self.bytes = 0

    def add_member(self, name: str) -> None:
        self.members += 1
        if self.members > self.max_members:
            raise ArchiveRejected(f"the archive has more than {self.max_members} members")

    def copy(self, source: IO[bytes], target: Path, name: str) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("xb") as out:
            for chunk in iter(lambda: source.read(1 << 20), b""):
                self.bytes += len(chunk)
                if self.bytes > self.max_bytes:
                    raise ArchiveRejected(
                        f"the archive unpacks to more than {self.max_bytes // (1024 * 1024)} MB "
                        f"(reached at member '{name}')"
                    )
                out.write(chunk)


@dataclass(frozen=True)
class _Member:
    """One entry of a zip or a tar, as the unpack loop sees it."""

    name: str
    is_dir: bool
    refusal: str | None  # why its kind is refused (a link, a device), in the archive format's own words
    open: Callable[[], IO[bytes]]


def unpack(archive: IO[bytes], kind: str, target: Path, *, max_members: int, max_bytes: int) -> None:
    """Write the archive's regular files and folders under `target` (which must exist and be empty)."""
    budget = _Budget(max_members, max_bytes)
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zipped:
                _unpack_members(_zip_members(zipped), target, budget)
        else:
            with tarfile.open(fileobj=archive, mode="r:*") as tarred:
                _unpack_members(_tar_members(tarred), target, budget)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        if is_storage_full(exc):
            raise  # the archive is fine, the disk is not: the caller answers 507
        raise ArchiveRejected(f"the archive cannot be read: {exc}") from None


def _unpack_members(members: Iterator[_Member], target: Path, budget: _Budget) -> None:
    """The one loop over a zip's or a tar's entries: count, refuse, then make the folder or copy the file."""
    for member in members:
        budget.add_member(member.name)
        if member.refusal is not None:
            raise ArchiveRejected(f"member '{member.name}' {member.refusal}")
        relative = member_path(member.name)
        if relative is None:
            continue
        destination = target.joinpath(*relative.parts)
        if member.is_dir:
            destination.mkdir(parents=True, exist_ok=True)
            continue
        _refuse_duplicate(destination, member.name)
        with member.open() as source:
            budget.copy(source, destination, member.name)


def _zip_members(bundle: zipfile.ZipFile) -> Iterator[_Member]:
    for info in bundle.infolist():
        mode = info.external_attr >> 16
        refusal = None
        if stat.S_ISLNK(mode):
            refusal = "is a symbolic link"
        elif mode and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
            refusal = "is not a regular file or folder"
        yield _Member(info.filename, info.is_dir(), refusal, functools.partial(bundle.open, info))


def _tar_members(bundle: tarfile.TarFile) -> Iterator[_Member]:
    for member in bundle:
        refusal = None
        if member.issym() or member.islnk():
            refusal = f"is a link (to '{member.linkname}')"
        elif not (member.isfile() or member.isdir()):
            refusal = "is a device, pipe or other special file"
        yield _Member(member.name, member.isdir(), refusal, functools.partial(_tar_source, bundle, member))


def _tar_source(bundle: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    source = bundle.extractfile(member)
    if source is None:
        raise ArchiveRejected(f"member '{member.name}' cannot be read")
    return source


def _refuse_duplicate(destination: Path, name: str) -> None:
    if destination.exists():
        raise ArchiveRejected(f"member '{name}' appears twice in the archive")


def version_folder_of(unpacked: Path) -> Path:
    """The folder holding the model files: unwrap one enclosing folder, and descend into a lone numbered one.

    People zip a version folder (`3/model.onnx`), its contents (`model.onnx`), or a whole model folder
    (`digits/config.pbtxt`, `digits/1/model.onnx`); all three give the folder with the model file.
    """
    folder = unpacked
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir():
        folder = entries[0]
        entries = list(folder.iterdir())
    dirs = [entry for entry in entries if entry.is_dir()]
    files = [entry for entry in entries if entry.is_file() and not entry.name.startswith("config.")]
    if len(dirs) == 1 and not files and dirs[0].name.isdigit():
        return dirs[0]
    return folder


def model_folders_of(unpacked: Path) -> dict[str, Path]:
    """The model folders of an archive of several (a repository, or its contents), by name; empty for one model.

    Several folders side by side, none numbered, each holding a config file or a numbered version folder, make
    a repository (`digits_pipeline/config.pbtxt`, `digits/1/model.onnx`, ...). Loose files beside them are not
    part of any model; a loose model or config file means the archive is one version folder after all.
    """
    folder = unpacked
    entries = list(folder.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not _is_model_folder(entries[0]):
        folder = entries[0]
        entries = list(folder.iterdir())
    dirs = sorted((entry for entry in entries if entry.is_dir()), key=lambda entry: entry.name)
    loose = {entry.name for entry in entries if entry.is_file()}
    if len(dirs) < 2 or loose & MODEL_AND_CONFIG_FILES or any(entry.name.isdigit() for entry in dirs):
        return {}
    if not all(_is_model_folder(entry) for entry in dirs):
        return {}
    return {entry.name: entry for entry in dirs}


def _is_model_folder(folder: Path) -> bool:
    return any((folder / name).is_file() for name in CONFIG_FILES) or any(
        entry.is_dir() and entry.name.isdigit() for entry in folder.iterdir()
    )


def move_contents(source: Path, target: Path) -> None:
    """Move everything in `source` into the existing folder `target`."""
    for entry in source.iterdir():
        shutil.move(str(entry), str(target / entry.name))
