"""The console's packages say its parts, and no part imports back up.

Each package of console/ (console/<pkg>/, subpackages included) is one node, each loose module of console/ another;
an import from one node to another (top level or inside a function) is an arrow. The rules:

- no cycle between nodes;
- a package imports other packages and the shared leaves below, never another loose module of console/ (those are
  the top: settings, URL maps, the ASGI entry, pages);
- a shared leaf imports nothing of console/ but other shared leaves, so everyone may import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "console"

SHARED_LEAVES = frozenset(
    {
        "console.config",  # InferaSettings, read once from the environment
        "console.env",  # the strict environment readers
        "console.forwarded",  # trusted proxies' headers (a part of the settings)
        "console.outages",  # dependency outages logged once
        "console.layer_tasks",  # channel-layer listeners ended for sure
        "console.listing",  # sortable lists
        "console.parsers",  # the management API's JSON parser
        "console.runtime_of",  # the Runtime from a connection's scope
        "console.server_paths",  # text without the server's paths
    }
)


def node_of(module: str) -> str:
    """`console.registry.services.lookups` → `console.registry`; `console.config` → `console.config`."""
    return ".".join(module.split(".")[:2])


def module_name(path: Path) -> str:
    parts = path.relative_to(CONSOLE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST) -> set[str]:
    """The console modules a module imports, anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "console":
                found.update(f"console.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return {name for name in found if name.startswith("console.")}


def arrows() -> dict[str, dict[str, set[str]]]:
    """node → node it imports → the modules that import it."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(CONSOLE.rglob("*.py")):
        module = module_name(path)
        source = node_of(module)
        for target in imported(ast.parse(path.read_text(encoding="utf-8"))):
            if node_of(target) != source:
                graph.setdefault(source, {}).setdefault(node_of(target), set()).add(module)
    return graph


def is_package(node: str) -> bool:
    return (CONSOLE / node.split(".")[1]).is_dir()


def cycles(graph: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_cycle_between_the_consoles_parts():
    graph = arrows()
    problems = [
        " ↔ ".join(group)
        + ": "
        + "; ".join(
            f"{source} → {target} ({', '.join(sorted(graph[source][target]))})"
            for source in group
            for target in group
            if target in graph.get(source, {})
        )
        for group in cycles(graph)
    ]
    assert problems == []


def test_packages_import_no_loose_module_but_the_shared_leaves():
    upward = [
        f"{module} imports {target}"
        for source, targets in arrows().items()
        if is_package(source)
        for target, modules in targets.items()
        if not is_package(target) and target not in SHARED_LEAVES
        for module in sorted(modules)
    ]
    assert upward == []


def test_shared_leaves_import_only_shared_leaves():
    graph = arrows()
    for leaf in sorted(SHARED_LEAVES):
        assert (CONSOLE / f"{leaf.split('.')[1]}.py").is_file(), f"{leaf} is no loose module of console/"
        assert set(graph.get(leaf, {})) <= SHARED_LEAVES, f"{leaf} imports {sorted(graph[leaf])}"


def test_the_walk_sees_the_arrows_it_should():
    graph = arrows()
    assert "console.registry" in graph["console.hosting"]  # the runtime owns the reconciler
    assert "console.runtime_of" in graph["console.registry"]
    assert cycles({"a": {"b": set()}, "b": {"a": set()}, "c": {"a": set()}}) == [["a", "b"]]
