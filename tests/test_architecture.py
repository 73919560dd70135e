"""The layout shows the architecture, and stays that way: thin assets, tables named once, one run-view
contract, imports pointing one way, folder = Dagster group = Iceberg namespace = pool."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from iceberg_catalog.schemas import NAMESPACES, TABLES

REPO = Path(__file__).resolve().parents[1]
PRODUCTION = ("assets", "resources", "orchestration", "loader")
STATES = ("raw", "curated", "dedup", "tokenized", "quarantine", "run_view", "governance")
DAGSTER_DECORATORS = {"asset", "multi_asset", "asset_check", "multi_asset_check", "op"}
MAX_BODY_LINES = 30


def python_files(*folders: str) -> list[Path]:
    return sorted(p for f in folders for p in (REPO / f).rglob("*.py"))


def decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")


def dagster_functions(path: Path) -> list[ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and any(decorator_name(d) in DAGSTER_DECORATORS for d in n.decorator_list)
    ]


def body_lines(fn: ast.FunctionDef) -> int:
    return fn.end_lineno - fn.body[0].lineno + 1


def test_assets_checks_and_ops_are_thin_and_documented():
    fns = [(p, fn) for p in python_files("assets") for fn in dagster_functions(p)]
    assert len(fns) >= 20, "the scan found too few asset functions: is the decorator detection broken?"
    long = {f"{p.relative_to(REPO)}:{fn.name}": body_lines(fn) for p, fn in fns if body_lines(fn) > MAX_BODY_LINES}
    assert not long, f"asset/check/op bodies over {MAX_BODY_LINES} lines: {long}"
    undocumented = [f"{p.relative_to(REPO)}:{fn.name}" for p, fn in fns if ast.get_docstring(fn) is None]
    assert not undocumented, f"these Dagster functions have no docstring (the UI shows it): {undocumented}"


def table_literals(folders: tuple[str, ...]) -> list[str]:
    found = []
    for path in python_files(*folders):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in TABLES:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}")
    return found


def test_no_table_name_literal_outside_iceberg_catalog():
    assert not table_literals(PRODUCTION), "name tables by their TableDef constant (iceberg_catalog.schemas)"


def test_the_run_view_contract_is_defined_once():
    defined = sorted(
        f"{p.relative_to(REPO)}:{n.name}"
        for p in python_files(*PRODUCTION, "iceberg_catalog")
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef) and n.name in ("samples_digest", "tag_name", "manifest_sha256")
    )
    assert defined == [
        "iceberg_catalog/run_view_contract.py:manifest_sha256",
        "iceberg_catalog/run_view_contract.py:samples_digest",
        "iceberg_catalog/run_view_contract.py:tag_name",
    ]


def loaded_modules(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def test_a_state_does_not_import_the_states_above_it():
    modules = loaded_modules("import assets.raw.defs")
    assert not {
        m for m in modules if m.startswith(("assets.governance", "assets.run_view", "assets.curated", "orchestration"))
    }


@pytest.mark.parametrize("package", ["iceberg_catalog", "resources", "assets", "loader"])
def test_nothing_imports_orchestration(package):
    importers = [
        str(p.relative_to(REPO))
        for p in python_files(package)
        if re.search(r"^\s*(from|import) orchestration", p.read_text(), re.M)
    ]
    assert not importers


def test_folder_group_namespace_and_pool_agree():
    from orchestration.definitions import defs

    graph = defs.resolve_asset_graph()
    assert set(STATES) == set(NAMESPACES)
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        state = key.path[0]
        assert state in STATES and node.group_name == state, (key, node.group_name)
        assets_def = node.assets_def
        pool = assets_def.op.pool if assets_def.is_executable else None
        assert pool in (None, f"iceberg_{state}"), (key, pool)
        module = assets_def.op.compute_fn.decorated_fn.__module__
        assert module == f"assets.{state}.defs", (key, module)
        erasure = (node.metadata or {}).get("tokenlake/erasure")
        for entry in (erasure or {}).get("tables", []):
            assert TABLES[entry["table"]].namespace == state, (key, entry["table"])


# --- imports point one way --------------------------------------------------------------------------------

GRAPH_PACKAGES = ("assets", "resources", "orchestration", "loader", "iceberg_catalog")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project modules `path` imports anywhere in its AST: at module level, in functions, under
    TYPE_CHECKING (`from package import module` names the module, `from module import name` the module)."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, `level - 1` packages up
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names}
    return found & modules


def import_graph() -> dict[str, set[str]]:
    """Every module under GRAPH_PACKAGES -> the project modules it imports (itself excepted)."""
    paths = {module_name(p): p for p in python_files(*GRAPH_PACKAGES)}
    return {m: imported_modules(p, set(paths)) - {m} for m, p in paths.items()}


def collapsed(graph: dict[str, set[str]], node_of) -> dict[str, set[str]]:
    """The graph with each module replaced by `node_of(module)` (None drops it), edges inside a node dropped."""
    out: dict[str, set[str]] = {}
    for m, targets in graph.items():
        if (a := node_of(m)) is not None:
            out.setdefault(a, set()).update(b for t in targets if (b := node_of(t)) not in (None, a))
    return out


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """The shortest import path from `start` back to itself (breadth first), or None."""
    parent = {t: start for t in sorted(graph.get(start, ()))}
    queue = list(parent)
    while queue:
        node = queue.pop(0)
        if node == start:
            path = [start]
            while (node := parent[node]) != start:
                path.append(node)
            return [start, *reversed(path[1:]), start]
        for t in sorted(graph.get(node, ())):
            if t not in parent:
                parent[t] = node
                queue.append(t)
    return None


def cycles(graph: dict[str, set[str]], starts) -> list[str]:
    """One cycle per start node that lies on one, as `a -> b -> a` (each cycle once)."""
    found = {}
    for s in starts:
        if (c := cycle_through(graph, s)) is not None:
            found.setdefault(frozenset(c), " -> ".join(c))
    return sorted(found.values())


def state_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "assets" and len(parts) > 1 and parts[1] in STATES else None


def test_no_defs_module_imports_another_states_defs():
    graph = import_graph()
    crossing = sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if state_of(m) is not None and m.endswith(".defs")
        for t in targets
        if t.endswith(".defs") and state_of(t) not in (None, state_of(m))
    )
    assert not crossing, f"a defs module names another state's asset keys by importing it (use table_key): {crossing}"


def test_the_import_graph_has_no_cycle_in_iceberg_catalog():
    graph = import_graph()
    assert len(graph) > 100, "the scan found too few modules"
    inside = collapsed(graph, lambda m: m if m.split(".")[0] == "iceberg_catalog" else None)
    found = cycles(inside, inside)
    assert not found, f"import cycles in iceberg_catalog (function-level imports count): {found}"


def test_the_import_graph_has_no_cycle_between_states():
    def node_of(module: str) -> str | None:
        state = state_of(module)
        return module if state is None else f"assets.{state}"

    graph = collapsed(import_graph(), node_of)
    found = cycles(graph, [f"assets.{s}" for s in STATES])
    assert not found, f"import cycles between state packages (function-level imports count): {found}"


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` imports, directly or through others."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), set()) - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_governance_is_imported_by_nothing_it_governs():
    """Governance writes policies and proposals and imports the states; the states read the active policy through
    iceberg_catalog.policy_store, a leaf below them."""
    graph = import_graph()
    importers = sorted(
        m
        for m, targets in graph.items()
        if not m.startswith(("assets.governance", "orchestration"))
        and any(state_of(t) == "governance" for t in targets)
    )
    assert not importers, (
        f"these modules import governance (read policies via iceberg_catalog.policy_store): {importers}"
    )
    assert not {m for m in reachable(graph, "iceberg_catalog.policy_store") if m.startswith("assets")}
