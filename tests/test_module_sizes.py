"""No .py file of the product or its bench over 500 lines (tests and generated code aside): one module, one job."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 500


def product_modules() -> list[Path]:
    """The repository's tracked Python files, tests and generated protobuf modules aside."""
    listed = subprocess.run(  # noqa: S603 - git with fixed arguments
        ["git", "ls-files", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,  # noqa: S607
    ).stdout.split()
    return [ROOT / name for name in listed if not name.startswith("tests/") and not name.endswith("_pb2.py")]


def test_it_finds_the_products_modules():
    names = {path.relative_to(ROOT).as_posix() for path in product_modules()}
    assert {"engine/api.py", "manage.py"} <= names
    assert not any(name.startswith("tests/") for name in names)


def test_it_keeps_every_module_under_500_lines():
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in product_modules()
        if path.exists() and (lines := len(path.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not long, f"split these by subject (one module, one job): {long}"
