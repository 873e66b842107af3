"""Names that become paths: model names and the files of a repository load, checked before anything touches the disk.

A model name is a folder name and a URL segment on every platform the store may live on, so it is refused when it
could mean something else to a filesystem (`..`, a hidden folder, a Windows device such as `CON`, a trailing dot).
A `file:` path of Triton's repository load is normalised first (leading and doubled slashes and `.` dropped, as
Triton's own clients send `/1/model.py`), then refused when it climbs out of the model folder or when another path
needs it to be a folder; every later decision (what the load is, whether it runs code) is made on the normalised
path only.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from engine.errors import InvalidArgument

MODEL_NAME_RULE = (
    "letters, digits, '_', '-' and '.', starting with a letter, digit or '_', at most 128 characters, not ending "
    "with '.', and not a Windows device name such as CON or NUL"
)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")
# names Windows reserves for devices, with or without an extension (a store on SMB or NTFS cannot hold them)
_DEVICE_NAMES = frozenset(
    ["con", "prn", "aux", "nul"] + [f"com{i}" for i in range(10)] + [f"lpt{i}" for i in range(10)]
)
MAX_FILE_PATH_BYTES = 1024
MAX_FILE_NAME_BYTES = 255  # one path component, as Linux filesystems allow
MAX_FILE_DEPTH = 8
FILE_PREFIX = "file:"


def model_name_problem(name: object) -> str | None:
    """Why `name` cannot be a model name (a phrase a form can show under the field), or None when it can."""
    if not isinstance(name, str) or not _MODEL_NAME.match(name):
        return f"a model name may hold only {MODEL_NAME_RULE}"
    if name.endswith("."):
        return "a model name may not end with '.'"
    if name.split(".", 1)[0].lower() in _DEVICE_NAMES:
        return f"'{name.split('.', 1)[0]}' is a device name on Windows filesystems and cannot name a model"
    return None


def check_model_name(name: object) -> str:
    """`name` when it is a valid model name; InvalidArgument (400) saying why otherwise."""
    problem = model_name_problem(name)
    if problem is not None:
        raise InvalidArgument(f"model name {_shown(name)} is invalid: {problem}")
    return name  # type: ignore[return-value]


def without_folders(text: str, folder: Path) -> str:
    """`text` with `folder`'s absolute path (and its resolved form) left out: reasons a viewer reads show no server
    paths, only what is inside the repository (`simple/1/model.onnx`)."""
    for root in {str(folder), str(Path(folder).resolve())}:
        text = text.replace(root.rstrip("/") + "/", "")
    return text


def normalise_file_path(raw: str) -> PurePosixPath:
    """The relative path inside the model folder that a `file:<path>` parameter names; InvalidArgument if none.

    `1/model.py`, `/1/model.py`, `1//model.py/` and `./1/model.py/.` all give `1/model.py`.
    """
    shown = _shown(raw)
    if not isinstance(raw, str) or not raw:
        raise InvalidArgument(f"file path {shown} is empty")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in raw):
        raise InvalidArgument(f"file path {shown} holds a control character")
    if "\\" in raw:
        raise InvalidArgument(f"file path {shown} uses '\\'; paths use '/'")
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_FILE_PATH_BYTES:
        raise InvalidArgument(f"file path {shown} is longer than {MAX_FILE_PATH_BYTES} bytes")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if not parts:
        raise InvalidArgument(f"file path {shown} names no file")
    if ".." in parts:
        raise InvalidArgument(f"file path {shown} leaves the model folder")
    if len(parts) > MAX_FILE_DEPTH:
        raise InvalidArgument(f"file path {shown} is more than {MAX_FILE_DEPTH} folders deep")
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_FILE_NAME_BYTES:
            raise InvalidArgument(f"file path {shown} has a name longer than {MAX_FILE_NAME_BYTES} bytes")
    return PurePosixPath(*parts)


def normalise_files(files: dict[str, bytes]) -> dict[PurePosixPath, bytes]:
    """Every `file:` path normalised; two keys that name one file are refused (which content wins is a guess), and
    so is a file that another path needs as its folder (`1/model.py` and `1/model.py/x`)."""
    normalised: dict[PurePosixPath, bytes] = {}
    sent_as: dict[PurePosixPath, str] = {}
    for raw, content in files.items():
        path = normalise_file_path(raw)
        if path in normalised:
            raise InvalidArgument(f"file path {_shown(raw)} names '{path}', which another file parameter names too")
        normalised[path] = content
        sent_as[path] = raw
    for path, raw in sent_as.items():
        folder = next((parent for parent in path.parents if parent in normalised), None)
        if folder is not None:
            raise InvalidArgument(
                f"file path {_shown(raw)} needs '{folder}' to be a folder, but file path {_shown(sent_as[folder])} "
                "sends it as a file"
            )
    return normalised


def sent_files(parameters: Mapping[str, object]) -> dict[str, bytes]:
    """The contents of a repository load's `file:<path>` parameters, by the path as sent; InvalidArgument naming the
    parameter when one names no file or its value is not bytes (gRPC) or base64 text (HTTP's JSON, gRPC strings)."""
    files: dict[str, bytes] = {}
    for key, value in parameters.items():
        if not key.startswith(FILE_PREFIX):
            continue
        shown = _shown(key)
        path = key[len(FILE_PREFIX) :]
        if not path:
            raise InvalidArgument(f"parameter {shown} names no file")
        if isinstance(value, bytes):
            files[path] = value
        elif isinstance(value, str):
            try:
                files[path] = base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise InvalidArgument(f"parameter {shown} is not valid base64") from None
        else:
            raise InvalidArgument(f"parameter {shown} must carry the file's contents as bytes or base64 text")
    return files


def _shown(value: object) -> str:
    text = repr(value) if not isinstance(value, str) else "'" + value[:120] + ("...'" if len(value) > 120 else "'")
    return text
