"""SIGKILL the Dagster run process mid-commit, on a PostgreSQL catalog with an S3 warehouse (SeaweedFS).

A fresh process runs the `raw_ingest` job for one partition, counting its own Python calls (`sys.setprofile`,
no hook in production code); a calibration run records where each `commit_partitions` (the one Iceberg commit
helper) starts and ends, then seeded kill points land inside those windows (and a few before them, among the
tasks). The process SIGKILLs itself there: no `finally`, no atexit, as an OOM kill or a lost node. After
every kill: each raw table's current snapshot is complete (rows read = the rows its summary records) and holds
exactly the reference content (the partition was replaced whole or not at all). Then the orphan sweep removes
every object no snapshot references, and a rerun is idempotent (same content digests).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
import yaml

from iceberg_catalog import CatalogConfig, Lakehouse
from iceberg_catalog.digest import table_digest
from iceberg_catalog.maintenance import _path_key, referenced_files, sweep_orphan_files
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
from tests.cluster.servers import postgres, seaweedfs  # noqa: F401 - fixtures
from tests.conftest import SAMPLE_CRAWL

pytestmark = pytest.mark.slow  # ~1.5 minutes: a fresh process per kill

KEY = "LEGACY-ARCHIVES/wget-2024"  # two WARC files: two tasks, then one commit per raw table
IN_COMMIT, BEFORE_COMMIT, SEED = 6, 2, 16
RAW = (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)

CHILD = """
import json, os, signal, sys
import dagster as dg
from iceberg_catalog.commit import commit_partitions
from orchestration.definitions import build_defs
from orchestration.demo import discover_segments

kill_at, key, crawl = int(sys.argv[1]), sys.argv[2], sys.argv[3]
CODE = commit_partitions.__code__
calls, windows, open_, mids, wrote = 0, [], [], [], []

def count(frame, event, arg):
    global calls
    if event == "call":
        calls += 1
        if calls == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if frame.f_code is CODE:
            open_.append(calls)
        elif open_ and not wrote and frame.f_code.co_name == "create" and "pyiceberg/io" in frame.f_code.co_filename:
            wrote.append(calls)  # the commit's first metadata object (its data files were written before)
        elif open_ and frame.f_code.co_name == "commit_table" and wrote:
            mids.append((wrote.pop(), calls))  # ... up to the catalog swap: a kill here is mid-commit
    elif event == "return" and frame.f_code is CODE and open_:
        windows.append((open_.pop(), calls))
        wrote.clear()

defs = build_defs(crawl)
job = defs.resolve_job_def("raw_ingest")
with dg.DagsterInstance.ephemeral() as instance:
    discover_segments(defs, instance)
    sys.setprofile(count)
    res = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=False)
    sys.setprofile(None)
print("RESULT", json.dumps({"calls": calls, "windows": windows, "mids": mids, "success": res.success}), flush=True)
"""


def run_child(env: dict, kill_at: int) -> dict | None:
    """Run the job in a fresh process; None when it was SIGKILLed, else its call count and commit windows."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(kill_at), KEY, str(SAMPLE_CRAWL)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode == -9:
        return None
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["success"], proc.stderr[-3000:]
    return result


def complete(lakehouse: Lakehouse) -> list[str]:
    """Raw tables whose current snapshot's rows differ from what its summary records."""
    bad = []
    for t in RAW:
        snap = lakehouse.table(t).current_snapshot()
        recorded = int(snap.summary.additional_properties.get("total-records", -1))
        rows = lakehouse.scan_at(t, snap.snapshot_id, columns=("crawl",)).num_rows
        if rows != recorded:
            bad.append(f"{t.identifier}@{snap.snapshot_id}: {rows} rows, {recorded} recorded")
    return bad


def unreferenced(lakehouse: Lakehouse) -> list[str]:
    """Objects under the raw tables' locations that no retained snapshot or metadata references."""
    from pyarrow import fs as pafs

    out = []
    for t in RAW:
        table = lakehouse.table(t)
        keep = {_path_key(p) for p in referenced_files(table)}
        filesystem = table.io.fs_by_scheme("s3", None)
        base = _path_key(table.location())
        infos = filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
        out += [i.path for i in infos if i.type == pafs.FileType.File and i.path not in keep]
    return out


def test_sigkill_mid_commit_leaves_no_partial_commit_and_the_rerun_is_idempotent(tmp_path, postgres, seaweedfs):  # noqa: F811
    props = seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri, "wh-kill")
    cfg = tmp_path / "catalog.yaml"
    cfg.write_text(yaml.safe_dump({"name": "tokenlake", "properties": props}))
    env = {**os.environ, "TOKENLAKE_CATALOG": str(cfg), "TOKENLAKE_HOME": str(tmp_path / "home")}
    run_child(env, 0)  # the first run also creates namespaces and tables: more calls than a rerun
    lakehouse = Lakehouse(CatalogConfig("tokenlake", props))
    want = {t.identifier: table_digest(lakehouse, t) for t in RAW}
    calibration = run_child(env, 0)  # a rerun, as every kill run is
    windows, mids = calibration["windows"], calibration["mids"]
    assert len(windows) == 2 and len(mids) == 2, calibration  # one commit per raw table
    rng = random.Random(SEED)
    # anywhere in a commit, between its first metadata write and its catalog swap (a small share of its calls
    # since pyiceberg's metadata copies are gone), and on entering each swap: manifests written, catalog not
    points = sorted(rng.randint(lo, hi) for lo, hi in (rng.choice(windows) for _ in range(IN_COMMIT // 2)))
    points += sorted(rng.randint(lo, hi) for lo, hi in (rng.choice(mids) for _ in range(IN_COMMIT // 2)))
    points += [swap for _, swap in mids]
    points += [rng.randint(windows[0][0] // 2, windows[0][0] - 1) for _ in range(BEFORE_COMMIT)]
    killed = committed_before_death = mid_commit = 0
    strays: list[str] = []
    for point in points:
        before = lakehouse.snapshot_ids(RAW)
        outcome = run_child(env, point)
        killed += outcome is None
        after = lakehouse.snapshot_ids(RAW)
        committed_before_death += sum(before[k] != after[k] for k in before)
        assert complete(lakehouse) == [], f"kill at call {point}: a partial snapshot is visible"
        assert {t.identifier: table_digest(lakehouse, t) for t in RAW} == want, f"kill at call {point}"
        new = [x for x in unreferenced(lakehouse) if x not in strays]
        mid_commit += any("/metadata/" in x for x in new)  # manifests written, catalog not swapped: mid-commit
        strays += new
    assert killed == len(points), f"only {killed} of {len(points)} runs were killed"
    assert mid_commit > 0, "no kill landed between a commit's first metadata write and its catalog swap"
    removed = sum(len(sweep_orphan_files(lakehouse.table(t), uncommitted_min_age_seconds=0)) for t in RAW)
    assert unreferenced(lakehouse) == []
    assert run_child(env, 0)["success"]
    assert {t.identifier: table_digest(lakehouse, t) for t in RAW} == want
    assert complete(lakehouse) == []
    print(
        f"{killed} SIGKILLs ({IN_COMMIT} inside a commit, {BEFORE_COMMIT} among the tasks); "
        f"{committed_before_death} table commits had landed before the kill; {mid_commit} kills left a commit's "
        f"metadata written but not swapped in; 0 partial snapshots; {len(strays)} unreferenced objects before the "
        f"sweep, {removed} removed, 0 left; rerun identical"
    )
