"""The local Dagster instance: DAGSTER_HOME under TOKENLAKE_HOME, per-state pools limited by the catalog's kind,
and the one way the demo and the `tokenlake` commands run a job on it in-process."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from iceberg_catalog import CatalogConfig, tokenlake_home

if TYPE_CHECKING:  # dagster is imported by the functions that run a job: `tokenlake tables` never needs it
    import dagster as dg

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


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # Dagster's own events stay in the run log
FAILURE_PREFIX = "dagster._core.definitions.events.Failure: "


def execute_job(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    name: str,
    source: str,
    partition_key: str | dg.MultiPartitionKey | None = None,
    run_config: Mapping | None = None,
    *,
    quiet: bool = True,
    resources: Mapping[str, object] | None = None,
) -> dg.ExecuteInProcessResult:
    """Execute job `name` in-process on `instance`: the run is in the UI's run history, tagged with the command
    that started it (`source`); Dagster's console events only when not `quiet`. A failed run is returned, not
    raised (`failure_message` says why)."""
    return defs.resolve_job_def(name).execute_in_process(
        instance=instance,
        partition_key=partition_key,
        run_config={**(run_config or {}), **(QUIET if quiet else {})},
        tags={"tokenlake/source": source},
        resources=resources,
        raise_on_error=False,
    )


def failure_message(res: dg.ExecuteInProcessResult) -> str:
    """Why a run failed: its first failed step's error (a refusal's own words), else where to look."""
    failure = next((e for e in res.all_events if e.event_type_value == "STEP_FAILURE"), None)
    message = failure.step_failure_data.error.message.strip() if failure else f"see run {res.run_id}"
    return message.removeprefix(FAILURE_PREFIX)


def run_local_job(
    name: str, op: str | None, config: Mapping | None, source: str, partition_key: str | None = None
) -> tuple[bool, object]:
    """Run job `name` on the local instance with `config` for its op `op`: (True, the op's output) or (False, why
    it failed)."""
    prepare_dagster_home()
    # here, not at the top: the Definitions are built on import, after DAGSTER_HOME is set, and only by the
    # commands that run a job (`tokenlake tables` stays quick)
    import dagster as dg

    from orchestration.definitions import defs

    run_config = {"ops": {op: {"config": config}}} if op else {}
    with dg.DagsterInstance.get() as instance:
        res = execute_job(defs, instance, name, source, partition_key, run_config)
    if not res.success:
        return False, failure_message(res)
    return True, res.output_for_node(op) if op else None
