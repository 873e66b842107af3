"""The console reaches the engine through its typed API only: one door, checked on every import of console/."""

from __future__ import annotations

import ast
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"
# the engine's typed API (the facade, admission, settings, errors, configs, names, analysis) and its front ends
ALLOWED = {
    "engine",  # only as `from engine import admission`
    "engine.server",
    "engine.admission",
    "engine.settings",
    "engine.errors",
    "engine.config",
    "engine.config_format",
    "engine.names",
    "engine.analysis",  # analyses: candidate configs measured on temporary versions (the analyzer)
    "engine.frontend",
    "engine.frontend.http",
    "engine.frontend.direct_http",  # uvicorn's protocol answering /v2 inference past ASGI (the console's extends it)
    "engine.frontend.lifespan",
    "engine.frontend.grpc_server",
    "engine.frontend.openai",  # the OpenAI-compatible front end, and how a config declares a text generator
    "engine.monitoring.sampler",
    "engine.monitoring.prometheus",
    "engine.monitoring.merge",  # several processes' snapshots as the cluster's (the cluster view)
}


def engine_imports() -> dict[str, set[str]]:
    """Every engine module imported anywhere in console/, with the files importing it."""
    found: dict[str, set[str]] = {}
    for path in CONSOLE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "engine":
                names = [node.module]
                if node.module == "engine":
                    names = [f"engine.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.split(".")[0] == "engine"]
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(CONSOLE.parent)))
    return found


def test_the_console_imports_only_the_engines_typed_api():
    outside = {name: files for name, files in engine_imports().items() if name not in ALLOWED}
    assert not outside, f"console/ reaches past the engine's typed API: {outside}"


def test_the_seam_check_sees_imports_at_every_depth():
    assert "engine.admission" in engine_imports()  # services imports it as `from engine import admission`
