"""Imports go one way: the HTTP edge, then GraphQL, then the run log's rules, then the store.

Every module of gql/ is in one layer below, its folder's, or `common` at the top of
the package. A module imports its own layer's modules or lower ones, never a higher
layer's, and no module imports another that imports it back, however far round (lazy
imports inside functions count). A new module at the top of gql/ has to be given a
layer here, which is the point: where it sits is decided, not found later.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

GQL = Path(__file__).resolve().parent.parent / "gql"

# Highest first: the folders of gql/, then what stays at its top. `common` is what every
# layer may use: settings, metrics, logs, traces, request ids, and the vocabulary (kinds, run ids).
LAYERS: dict[str, set[str]] = {
    "entry": {"gql", "gql.__main__", "gql.cli"},  # gql/__init__.py imports nothing
    "edge": {"gql.edge", "gql.edge.*"},
    "api": {"gql.api", "gql.api.*"},
    "domain": {"gql.domain", "gql.domain.*"},
    "store": {"gql.store", "gql.store.*"},
    "common": {
        "gql.settings",
        "gql.setting_parsers",
        "gql.metrics",
        "gql.tracing",
        "gql.request_id",
        "gql.logs",
        "gql.kinds",
        "gql.ids",
        "gql.compat",  # what the service reaches for inside its libraries: imports no gql module
        "gql.compat.*",
    },
}
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def module_name(path: Path) -> str:
    parts = path.relative_to(GQL.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {
        module_name(path): path
        for path in GQL.rglob("*.py")
        if "versions" not in path.parts  # Alembic's revisions, run by Alembic
    }


def layer_of(module: str) -> str:
    for name, members in LAYERS.items():
        if any(module == m or (m.endswith(".*") and module.startswith(m[:-1])) for m in members):
            return name
    raise AssertionError(f"{module} has no layer: give it one in tests/test_layers.py")


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other gql modules, wherever in it they are written."""
    found: dict[str, set[str]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    targets.add(candidate if candidate in known else base)
            elif isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
        found[module] = {t for t in targets if t in known and t != module}
    return found


def upward(graph: dict[str, set[str]]) -> list[str]:
    for module in graph:
        layer_of(module)  # every module, imported or not
    return [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if RANK[layer_of(target)] < RANK[layer_of(module)]
    ]


def circles(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for start in sorted(graph):
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for target in sorted(graph[module]):
                if target == start:
                    found.append(" -> ".join([*path, start]))
                elif target not in seen:
                    seen.add(target)
                    stack.append((target, [*path, target]))
    return found


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower() -> None:
    assert upward(imports(modules())) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert circles(imports(modules())) == []


def test_the_checks_see_an_upward_import_a_circle_and_a_module_without_a_layer() -> None:
    graph = imports(modules())
    assert "gql.store" in graph["gql.api.schema"]  # what the scratch edits below rely on
    graph["gql.store.values"] = graph["gql.store.values"] | {"gql.api.schema"}
    assert upward(graph) == ["gql.store.values (store) imports gql.api.schema (api)"]
    assert any(c.startswith("gql.api.schema -> gql.store") for c in circles(graph))
    graph["gql.newcomer"] = set()
    with pytest.raises(AssertionError, match=r"gql\.newcomer has no layer"):
        upward(graph)


def into_execution(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module inside gql/api/execution/ from outside it: its package's exports are the way in."""
    return [
        f"{module} imports {target}"
        for module, targets in sorted(graph.items())
        if not module.startswith("gql.api.execution")
        for target in sorted(targets)
        if target.startswith("gql.api.execution.")
    ]


def test_execution_is_entered_through_its_package_alone() -> None:
    graph = imports(modules())
    assert into_execution(graph) == []
    graph["gql.edge.view"] = graph["gql.edge.view"] | {"gql.api.execution.compiler"}
    assert into_execution(graph) == ["gql.edge.view imports gql.api.execution.compiler"]


def test_no_module_is_over_500_lines() -> None:
    """A module past 500 lines holds more than one thing: split it where a newcomer would look."""
    assert {
        name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 500
    } == {}
