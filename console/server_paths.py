"""Text for console users with this server's file system paths taken out (model descriptions, failure reasons).

A path inside the model store or the var folder becomes relative to it ("simple/1/model.onnx"); any other absolute
path under a usual system root ("/home/...", "/tmp/...", "C:\\...") shrinks to its last part ("…/model.onnx").
URLs and API paths ("/v2/models/simple", "http://host/x") are left alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

SYSTEM_ROOTS = (
    "app", "data", "etc", "home", "lib", "media", "mnt", "nix", "opt", "private", "proc", "root", "run", "srv", "tmp",
    "Users", "usr", "var", "work", "workspace",
)  # fmt: skip
_SEGMENT = r"[^\s'\"`<>:,;()\[\]{}/\\]+"
_ABSOLUTE = re.compile(
    rf"(?<![\w.:/\\~-])(?:/(?:{'|'.join(SYSTEM_ROOTS)})(?:/{_SEGMENT})+/?|[A-Za-z]:\\(?:{_SEGMENT}\\?)+)"
)


def without_paths(text: str, roots: tuple[Path, ...] = ()) -> str:
    """`text` with paths under `roots` made relative to them and every other system path cut to its last part."""
    for root in sorted({str(root).rstrip("/\\") for root in roots if str(root).strip("/\\")}, key=len, reverse=True):
        text = text.replace(f"{root}/", "").replace(f"{root}\\", "").replace(root, "…")
    return _ABSOLUTE.sub(_last_part, text)


def _last_part(match: re.Match[str]) -> str:
    parts = [part for part in re.split(r"[/\\]", match.group(0)) if part]
    return f"…/{parts[-1]}" if parts else "…"


def shown(text: str) -> str:
    """`text` as console users see it on this server: no path of its model store, var folder or elsewhere."""
    infera = settings.INFERA
    return without_paths(text, (infera.model_store, infera.var_dir))
