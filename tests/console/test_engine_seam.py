"""The console reaches the engine through one module, `engine.api`: checked on every import anywhere in console/."""

from __future__ import annotations

import ast
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"
SEAM = "engine.api"


def engine_imports(source: str) -> set[str]:
    """The engine modules a source imports, at any depth (in functions, under `if TYPE_CHECKING:`, by import_module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine":  # `from engine import admission` imports the module engine.admission
                found.update(f"engine.{alias.name}" for alias in node.names)
            elif node.module.split(".")[0] == "engine":
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "engine")
        elif isinstance(node, ast.Call) and dynamic_import(node):
            found.add(node.args[0].value)
    return found


def dynamic_import(call: ast.Call) -> bool:
    """`import_module("engine.x")` or `__import__("engine.x")`, however the function was reached."""
    function = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    named = call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)
    return function in ("import_module", "__import__") and bool(named) and call.args[0].value.split(".")[0] == "engine"


def console_engine_imports() -> dict[str, set[str]]:
    """Every engine module imported anywhere in console/, with the files importing it."""
    found: dict[str, set[str]] = {}
    for path in CONSOLE.rglob("*.py"):
        for name in engine_imports(path.read_text(encoding="utf-8")):
            found.setdefault(name, set()).add(str(path.relative_to(CONSOLE.parent)))
    return found


def test_the_console_imports_only_the_engine_api():
    outside = {name: files for name, files in console_engine_imports().items() if name != SEAM}
    assert not outside, f"console/ imports the engine past {SEAM}: {outside}"


def test_the_seam_check_sees_imports_at_every_depth():
    source = """
from engine.api import InferenceServer
import engine.server
from engine import admission

if TYPE_CHECKING:
    from engine.lifecycle import ModelState

class Runner:
    def run(self):
        from engine.analysis import sweep
        import engine.monitoring.sampler as sampler
        return importlib.import_module("engine.frontend.http")
"""
    assert engine_imports(source) == {
        "engine.api",
        "engine.server",
        "engine.admission",
        "engine.lifecycle",
        "engine.analysis",
        "engine.monitoring.sampler",
        "engine.frontend.http",
    }


def test_the_seam_check_reads_the_console():
    assert console_engine_imports().get(SEAM)  # the console's files are found and read
