"""The engine's modules sit in packages that say what they hold, and no import goes round in a circle.

Every module of engine/ is read (AST); its imports at module level are arrows (those in function bodies run later,
those under `if TYPE_CHECKING:` never). Importing `engine.a.b` also runs the package `engine.a` first, so that is an
arrow too, unless the importing module is inside `engine.a` (its package is already being imported). The rules:

- no circle of arrows between modules;
- directly in engine/ only the package's own `__init__`, the console's door `api`, and the leaves everyone shares:
  `errors`, `settings`, `types`. Everything else belongs to a package of engine/.
"""

from __future__ import annotations

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"

TOP_LEVEL = frozenset({"__init__", "api", "errors", "settings", "types"})


def module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def engine_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(ENGINE.rglob("*.py"))}


def type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_statements(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements run when a module is imported: its body and class bodies, inside `if`, `try` and
    `with`, not in functions and not under `if TYPE_CHECKING:`."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If):
            found += import_statements(node.orelse)
            if not type_checking_only(node):
                found += import_statements(node.body)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(handler.body for handler in node.handlers)):
                found += import_statements(block)
        elif isinstance(node, ast.With | ast.ClassDef):
            found += import_statements(node.body)
    return found


def imported(module: str, path: Path, modules: set[str]) -> set[str]:
    """The engine modules `module` imports when it is imported (the packages around them included)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in import_statements(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        names.add(source)
        names.update(f"{source}.{alias.name}" for alias in node.names)  # `from engine.x import module`
    found: set[str] = set()
    for name in names:
        parts = name.split(".")
        for end in range(2, len(parts) + 1):  # engine.a, engine.a.b, ...: each runs when the last one is imported
            candidate = ".".join(parts[:end])
            if candidate in modules and not f"{module}.".startswith(f"{candidate}."):
                found.add(candidate)
    found.discard(module)
    return found


def arrows() -> dict[str, set[str]]:
    """module → the engine modules it imports when it is imported."""
    modules = engine_modules()
    return {module: imported(module, path, set(modules)) for module, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Circles of arrows, each as the path that closes it (`[a, b, a]`), one per arrow going back."""
    found: list[list[str]] = []
    done: set[str] = set()
    path: list[str] = []

    def follow(node: str) -> None:
        path.append(node)
        for target in sorted(graph.get(node, ())):
            if target in path:
                found.append([*path[path.index(target) :], target])
            elif target not in done:
                follow(target)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            follow(node)
    return found


def test_no_import_circle_between_the_engines_modules():
    assert [" → ".join(circle) for circle in circles(arrows())] == []


def test_only_the_door_and_the_shared_leaves_sit_directly_in_engine():
    loose = sorted(path.stem for path in ENGINE.glob("*.py") if path.stem not in TOP_LEVEL)
    assert loose == [], f"modules loose in engine/, to be put in its packages: {loose}"


def test_the_walk_sees_the_arrows_it_should():
    graph = arrows()
    assert "engine.serving.lifecycle" in graph["engine.serving.server"]
    assert "engine.monitoring" in graph["engine.serving.server"]  # its tracing runs the package first
    assert "engine.frontend" not in graph["engine.frontend.http"]  # its own package is already under way
    assert "engine.serving.server" not in graph["engine.frontend.http"]  # only under `if TYPE_CHECKING:`
    assert "engine.isolation.sandbox" not in graph["engine.serving.admission"]  # imported in a function
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
