"""The crash-drill harness: run one job of the pipeline in a forked child exactly as `make demo` and
`tokenlake run` do (`orchestration.demo.run_job`), and SIGKILL that child at a chosen point.

A point is the n-th Python function call of the child's main thread after an anchor (counted by a
`sys.setprofile` hook, so no production code carries a hook): a calibration run counts the calls of a whole run
and where each `commit_partitions` (the one Iceberg commit helper) starts and ends, and the drill picks seeded
points before the first commit, inside the commits and after the last one. The child kills its own process
group with SIGKILL there (the extraction workers of `curate` die with it), which is what an OOM killer or a
lost node does: no `finally`, no atexit, no flush.

After a kill the harness does what Dagster's run monitoring would do for a dead run worker: it marks the run
failed and frees its concurrency slots, so the rerun is not blocked by a run that will never finish.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRunStatus

from iceberg_catalog import TABLES, Lakehouse
from iceberg_catalog.commit import PROPERTY_PREFIX, commit_partitions
from iceberg_catalog.digest import table_digest
from iceberg_catalog.maintenance import referenced_files, sweep_orphan_files
from orchestration import demo

COMMIT_CODE = commit_partitions.__code__
CHILD_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class KillPoint:
    """The `n`-th Python call after an anchor: the start of the run (`start`), entering the `commit`-th
    `commit_partitions` (`enter`), or the return of the last one (`return`). Anchors rather than absolute
    call numbers, because every rerun reads a longer table history, so the calls before a commit grow."""

    anchor: str  # "start" | "enter" | "return"
    n: int
    commit: int = 0


class CallCounter:
    """A profile hook: counts Python calls of this thread, records where every `commit_partitions` starts
    and ends (call numbers), and SIGKILLs the process group at `kill` (a `KillPoint`)."""

    def __init__(self, kill: KillPoint | None = None, commits: int = 0) -> None:
        self.calls = 0
        self.kill = kill
        self.commits = commits  # how many commit_partitions calls the run makes (for the "return" anchor)
        self.windows: list[tuple[int, int]] = []
        self._open: list[int] = []
        self._since: int | None = 0 if kill is not None and kill.anchor == "start" else None

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            self.calls += 1
            if self._since is not None:
                self._since += 1
                if self._since == self.kill.n:
                    os.killpg(0, signal.SIGKILL)
            if frame.f_code is COMMIT_CODE:
                self._open.append(self.calls)
                if self.kill is not None and self.kill.anchor == "enter" and len(self.windows) == self.kill.commit:
                    self._since = 0
        elif event == "return" and frame.f_code is COMMIT_CODE and self._open:
            self.windows.append((self._open.pop(), self.calls))
            if self.kill is not None and self.kill.anchor == "return" and len(self.windows) == self.commits:
                self._since = 0


@dataclass(frozen=True)
class Job:
    """One drill target: a job of `orchestration.flow.STEPS`, one partition of it, its run config."""

    state: str
    name: str
    partition_key: object = None
    run_config: dict | None = None
    fresh: bool = False  # restore the lakehouse before each kill: the job writes only what is not there yet


@dataclass
class Outcome:
    """What one child did: killed (and at which call), or finished with the calls it made."""

    killed: bool
    calls: int = 0
    windows: list = field(default_factory=list)
    exit_status: int = 0


def run_child(
    crawl_root: Path, job: Job, kill: KillPoint | None, report: Path, commits: int = 0, count: bool = True
) -> Outcome:
    """Fork; the child runs `job` through `demo.run_job` under a `CallCounter` and dies at `kill`. The child
    builds its own Definitions and catalog: the test replaces the lakehouse's files between drills, and a
    catalog opened before that would still read the replaced SQLite file."""
    report.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # the child: never return into the test process
        status = 0
        try:
            os.setpgid(0, 0)
            from orchestration.definitions import build_defs

            defs = build_defs(str(crawl_root))
            counter = CallCounter(kill, commits)
            with dg.DagsterInstance.get() as instance:
                sys.setprofile(counter if count else None)  # a rerun needs no counting (a third less CPU)
                try:
                    demo.run_job(defs, instance, job.name, job.partition_key, job.run_config)
                finally:
                    sys.setprofile(None)
            report.write_text(json.dumps({"calls": counter.calls, "windows": counter.windows}))
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            sys.stdout.flush()
            os._exit(status)
    hung = threading.Event()
    watchdog = threading.Timer(CHILD_TIMEOUT_S, lambda: (hung.set(), _kill_group(pid)))
    watchdog.start()
    try:
        _, wait_status = os.waitpid(pid, 0)
    finally:
        watchdog.cancel()
    _kill_group(pid)  # workers the child started, if any outlived it
    if hung.is_set():
        raise TimeoutError(f"{job.name} {job.partition_key} did not finish in {CHILD_TIMEOUT_S} s")
    if os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGKILL:
        return Outcome(killed=True)
    code = os.waitstatus_to_exitcode(wait_status)
    if code != 0:
        raise RuntimeError(f"{job.name} {job.partition_key} failed in the child (exit {code}); see captured output")
    data = json.loads(report.read_text())
    return Outcome(killed=False, calls=data["calls"], windows=[tuple(w) for w in data["windows"]])


def warm_up(crawl_root: Path, job: Job) -> None:
    """Run `job` once in this process (a rerun: the tables' content does not change), so that every forked
    child inherits its imports and first-run caches instead of paying for them again (about half a child's
    time). The caller restores the lakehouse afterwards: the catalog opened here keeps reading the SQLite file
    it opened (the children never use it; each opens its own)."""
    from orchestration.definitions import build_defs

    with dg.DagsterInstance.get() as instance:
        demo.run_job(build_defs(str(crawl_root)), instance, job.name, job.partition_key, job.run_config)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark runs left STARTED/STARTING/NOT_STARTED by a killed child as failed and free their pool slots."""
    statuses = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED]
    reaped = []
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=statuses)):
        instance.report_run_failed(run, "run worker SIGKILLed by a crash drill")
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        reaped.append(run.run_id)
    return reaped


def fresh_lakehouse(old: Lakehouse | None = None) -> Lakehouse:
    """A lakehouse handle with a new catalog connection (closing `old`'s): pyiceberg's SQL catalog keeps its
    SQLite connection open, which after a restore would still read the replaced file."""
    if old is not None and old._catalog is not None:
        old._catalog.engine.dispose()
    return Lakehouse()


def snapshot_ids(lakehouse: Lakehouse) -> dict[str, int | None]:
    """The current snapshot id of every declared table."""
    return lakehouse.snapshot_ids(TABLES.values())


def incomplete_snapshots(lakehouse: Lakehouse, identifiers, checked: set[int]) -> list[str]:
    """Every snapshot of these tables not yet in `checked` whose rows (read from its data files) differ from
    the row count its own summary records, or that carries no tokenlake provenance; adds them to `checked`."""
    bad = []
    for ident in identifiers:
        t = TABLES[ident]
        for snap in lakehouse.table(t).snapshots():
            if snap.snapshot_id in checked:
                continue
            summary = snap.summary.additional_properties
            recorded = int(summary.get("total-records", -1))
            rows = lakehouse.scan_at(t, snap.snapshot_id, columns=(t.arrow_schema.names[0],)).num_rows
            if rows != recorded or PROPERTY_PREFIX + "asset-key" not in summary:
                bad.append(f"{ident}@{snap.snapshot_id}: {rows} rows read, {recorded} recorded")
            checked.add(snap.snapshot_id)
    return bad


def views_without_samples(lakehouse: Lakehouse) -> list[str]:
    """Run views whose manifest row (the view's commit point, written last) counts other samples than
    run_view.samples holds for it."""
    from iceberg_catalog.schemas import RUN_VIEW_MANIFESTS, RUN_VIEW_SAMPLES

    samples = lakehouse.scan(RUN_VIEW_SAMPLES, ("run_view_id",))["run_view_id"].to_pylist()
    bad = []
    for row in lakehouse.scan(RUN_VIEW_MANIFESTS, ("run_view_id", "n_samples")).to_pylist():
        held = samples.count(row["run_view_id"])
        if held != row["n_samples"]:
            bad.append(f"{row['run_view_id']}: manifest says {row['n_samples']} samples, {held} stored")
    return bad


def digests(lakehouse: Lakehouse, identifiers) -> dict[str, dict]:
    """Row count and content digest of each table's current snapshot."""
    return {ident: table_digest(lakehouse, TABLES[ident]) for ident in sorted(identifiers)}


def _local(location: str) -> str:
    return unquote(urlparse(location).path) if location.startswith("file:") else location


def unreferenced_files(lakehouse: Lakehouse, ident: str) -> list[str]:
    """Files under the table's location that neither its metadata nor any retained snapshot reads."""
    table = lakehouse.table(TABLES[ident])
    keep = {_local(p) for p in referenced_files(table)}
    root = _local(table.location())
    present = {str(Path(d) / f) for d, _, files in os.walk(root) for f in files if f != "version-hint.text"}
    return sorted(present - keep)


def sweep(lakehouse: Lakehouse, identifiers) -> int:
    """The orphan sweep on each table with no grace period (no writer runs during a drill): files removed."""
    removed = 0
    for ident in identifiers:
        table = lakehouse.table(TABLES[ident])
        removed += len(sweep_orphan_files(table, catalog_fingerprint=lakehouse.lock_key, uncommitted_min_age_seconds=0))
    return removed
