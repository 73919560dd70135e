"""The local Dagster instance: DAGSTER_HOME under TOKENLAKE_HOME, per-state pools limited by the catalog's kind."""

from __future__ import annotations

import os
from pathlib import Path

from iceberg_catalog import CatalogConfig, tokenlake_home

MARK = "# written by tokenlake (orchestration/instance.py): rewritten when the catalog changes\n"
# SQLite catalogs lose commits under contention: one materialisation per pool (assets declare
# pool="iceberg_<state>"). PostgreSQL and REST catalogs resolve concurrent commits themselves: backfills of many
# partitions then run POOL_LIMIT at a time (TOKENLAKE_POOL_LIMIT).
_TEMPLATE = """\
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  pools:
    default_limit: {limit}
"""
POOL_LIMIT = 4


def dagster_yaml(limit: int = 1) -> str:
    """Our dagster.yaml: no telemetry, `limit` concurrent materialisations per pool."""
    return _TEMPLATE.format(limit=limit)


DAGSTER_YAML = dagster_yaml(1)  # the embedded (SQLite) default


def pool_limit(config: CatalogConfig | None = None) -> int:
    """Concurrent materialisations per state pool: 1 on SQLite, else `TOKENLAKE_POOL_LIMIT` (default 4)."""
    if (config or CatalogConfig.resolve()).is_embedded_sqlite:
        return 1
    raw = os.environ.get("TOKENLAKE_POOL_LIMIT", str(POOL_LIMIT))
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"TOKENLAKE_POOL_LIMIT must be a positive integer, got {raw!r}")
    return int(raw)


def prepare_dagster_home(path: Path | None = None) -> Path:
    """Create DAGSTER_HOME (default `$TOKENLAKE_HOME/dagster`) with our dagster.yaml and export it."""
    home = (path or Path(os.environ.get("DAGSTER_HOME") or tokenlake_home() / "dagster")).resolve()
    home.mkdir(parents=True, exist_ok=True)
    cfg = home / "dagster.yaml"
    if not cfg.exists() or cfg.read_text().startswith(MARK):  # a file someone wrote by hand is theirs
        cfg.write_text(MARK + dagster_yaml(pool_limit()))
    os.environ["DAGSTER_HOME"] = str(home)
    return home
