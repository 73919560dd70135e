"""The local Dagster instance: DAGSTER_HOME under TOKENLAKE_HOME, with per-table commit pools limited to 1."""

from __future__ import annotations

import os
from pathlib import Path

from iceberg_catalog import tokenlake_home

# SQLite catalogs lose commits under contention: one committer per pool (assets declare pool="iceberg_<state>").
# Raise default_limit when the catalog is PostgreSQL/REST.
DAGSTER_YAML = """\
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  pools:
    default_limit: 1
"""


def prepare_dagster_home(path: Path | None = None) -> Path:
    """Create DAGSTER_HOME (default `$TOKENLAKE_HOME/dagster`) with our dagster.yaml and export it."""
    home = (path or Path(os.environ.get("DAGSTER_HOME") or tokenlake_home() / "dagster")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists():
        cfg.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home
