"""The Definitions load, and the asset graph (keys and their upstream keys) matches the reviewed snapshot.

An intentional lineage change: run `UPDATE_SNAPSHOTS=1 pytest tests/orchestration/test_defs.py` and review
the diff of asset_graph.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from orchestration.definitions import defs

SNAPSHOT = Path(__file__).with_name("asset_graph.json")
REPO = Path(__file__).resolve().parents[2]


def asset_graph() -> dict[str, dict[str, object]]:
    graph = defs.resolve_asset_graph()
    out = {}
    for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string()):
        node = graph.get(key)
        out[key.to_user_string()] = {
            "upstream": sorted(k.to_user_string() for k in node.parent_keys),
            "group": node.group_name,
            "partitions": type(node.partitions_def).__name__ if node.partitions_def else None,
            "code_version": node.code_version,
        }
    return out


def test_asset_graph_snapshot():
    current = asset_graph()
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(current, indent=2, sort_keys=True) + "\n")
    assert current == json.loads(SNAPSHOT.read_text())


def test_definitions_validate_loadable():
    dg.Definitions.validate_loadable(defs)
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"raw_ingest"}


def test_dagster_cli_validates_the_workspace(tmp_path):
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "TOKENLAKE_HOME": str(tmp_path / "tl")}
    bin_dir = Path(sys.executable).parent
    proc = subprocess.run(
        [str(bin_dir / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Validation successful" in proc.stdout + proc.stderr


def test_loader_and_catalog_import_without_dagster():
    code = (
        "import sys; sys.modules['dagster'] = None\n"
        "import loader, iceberg_catalog\n"
        "assert 'dagster' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_step_order_is_declared_once_and_shown_in_the_readme():
    from orchestration.flow import STEPS, steps_markdown

    assert steps_markdown() in (REPO / "README.md").read_text(), "README's step table is stale: paste steps_markdown()"
    jobs = {j.name: j for j in defs.resolve_all_job_defs()}
    for step in STEPS:
        assert step.job in jobs, step.job
        job = jobs[step.job]
        keys = {k.path[0] for k in job.asset_layer.selected_asset_keys} if job.asset_layer else set()
        assert not keys or keys == {step.state}, (step.job, keys)
