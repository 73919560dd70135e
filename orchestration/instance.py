"""The local Dagster instance: DAGSTER_HOME under TOKENLAKE_HOME, per-state pools limited by the catalog's kind,
and the one way the demo and the `tokenlake` commands run a job on it in-process."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from datetime import UTC, datetime
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


# Dagster logs a run's failure (the step failure and its traceback) at ERROR: a command reports it in one line
# (`failure_report`) and the run's event log keeps the rest (`tokenlake log RUN_ID`, the UI's Runs page)
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# Dagster's wrappers around an exception raised in an op: the op's own error is their cause
WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")


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
    raised (`failure_report` says why)."""
    return defs.resolve_job_def(name).execute_in_process(
        instance=instance,
        partition_key=partition_key,
        run_config={**(run_config or {}), **(QUIET if quiet else {})},
        tags={"tokenlake/source": source},
        resources=resources,
        raise_on_error=False,
    )


def failure_message(res: dg.ExecuteInProcessResult) -> str:
    """Why a run failed, on one line: a refusal's own words (the `dg.Failure`'s description), else the op's
    error (`KeyError: 'x'`), else where to look."""
    failure = next((e for e in res.all_events if e.event_type_value == "STEP_FAILURE"), None)
    if failure is None:
        return f"run {res.run_id} failed"
    data = failure.step_failure_data
    if data.user_failure_data is not None and data.user_failure_data.description:
        return one_line(data.user_failure_data.description)
    error = data.error
    while error.cause is not None and error.cls_name in WRAPPERS:
        error = error.cause
    return one_line(error.message)


def one_line(text: str) -> str:
    """`text`'s non-blank lines, stripped and joined by spaces."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def failure_report(res: dg.ExecuteInProcessResult) -> str:
    """A failed run for a terminal, one line: why, the run id and the command that prints its whole log."""
    return f"{failure_message(res)} (run {res.run_id}; its full log: tokenlake log {res.run_id})"


def run_log(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """A run's event log as Dagster's console prints it with --verbose (a failure with its traceback); empty
    for an unknown run."""
    lines = []
    for entry in instance.all_logs(run_id):
        when = datetime.fromtimestamp(entry.timestamp, UTC).isoformat(timespec="seconds")
        event = entry.dagster_event.event_type_value if entry.dagster_event else ""
        level = logging.getLevelName(entry.level)
        lines.append(f"{when} {level:<7} {entry.step_key or '-'} {event} {entry.user_message}".rstrip())
        data = entry.dagster_event.step_failure_data if event == "STEP_FAILURE" else None
        if data is not None and data.error is not None:
            lines += ["    " + line for line in data.error.to_string().rstrip().splitlines()]
    return lines


def run_local_job(
    name: str,
    op: str | None,
    config: Mapping | None,
    source: str,
    partition_key: str | None = None,
    *,
    verbose: bool = False,
) -> tuple[bool, object]:
    """Run job `name` on the local instance with `config` for its op `op`: (True, the op's output) or (False, why
    it failed, its run id and how to read its log: `failure_report`). Dagster's console events only if `verbose`."""
    prepare_dagster_home()
    # here, not at the top: the Definitions are built on import, after DAGSTER_HOME is set, and only by the
    # commands that run a job (`tokenlake tables` stays quick)
    import dagster as dg

    from orchestration.definitions import defs

    run_config = {"ops": {op: {"config": config}}} if op else {}
    with dg.DagsterInstance.get() as instance:
        res = execute_job(defs, instance, name, source, partition_key, run_config, quiet=not verbose)
    if not res.success:
        return False, failure_report(res)
    return True, res.output_for_node(op) if op else None
