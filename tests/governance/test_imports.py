"""Governance is the top of the house: it imports the states it governs, never the reverse. Counting every
import (function-level ones too), no project module below orchestration imports governance, and no import
cycle runs through it; the states read the active policy through `iceberg_catalog.policy_store`."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("assets", "resources", "orchestration", "iceberg_catalog", "loader")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """{module: the project modules it imports anywhere in its body}, `from a import b` counting a.b when b is
    a module."""
    paths = {module_name(p): p for pkg in PACKAGES for p in (REPO / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)
                found |= {f"{node.module}.{a.name}" for a in node.names}
        graph[name] = {m for m in found if m in paths and m != name}
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_module_below_orchestration_imports_governance():
    graph = import_graph()
    importers = sorted(
        m
        for m, deps in graph.items()
        if not m.startswith(("assets.governance", "orchestration"))
        and any(d.startswith("assets.governance") for d in deps)
    )
    assert not importers, (
        f"these modules import governance (the states must read policies via policy_store): {importers}"
    )


def test_no_import_cycle_runs_through_governance():
    graph = import_graph()
    cycles = sorted(m for m in graph if m.startswith("assets.governance") and m in reachable(graph, m))
    assert not cycles, f"governance modules that import themselves back through other modules: {cycles}"


def test_the_policy_store_is_a_leaf_below_the_states():
    graph = import_graph()
    assert not {m for m in reachable(graph, "iceberg_catalog.policy_store") if m.startswith("assets")}
