"""Crash drills: for each state, SIGKILL the process materialising one partition at 20 seeded points (some
inside the Iceberg commit) and check, after every kill:

1. every snapshot the catalog shows is complete: the rows read from its data files equal the row count its
   own summary records, and it carries the pipeline's provenance (no half-made snapshot is visible);
2. the tables the job writes still hold exactly what they held before (the partition was either replaced
   whole or not at all; the job's output is deterministic, so both read the same);
3. the orphan sweep leaves no file that the metadata does not reference;
4. the rerun succeeds and is idempotent: the same content digests as before the kill.

One lakehouse is built once (the demo's steps on a two-segment crawl copied from the sample crawl) and
restored at the same path before each state (Iceberg metadata holds absolute paths). See `crash.py` for how
the points are chosen and the child is killed.
"""

from __future__ import annotations

import copy
import os
import random
import shutil
import subprocess
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest

from orchestration.demo import DEMO_RUN_VIEW, DEMO_TOKENIZER
from tests.drills.crash import (
    Job,
    KillPoint,
    Outcome,
    digests,
    fresh_lakehouse,
    incomplete_snapshots,
    reap_dead_runs,
    run_child,
    snapshot_ids,
    sweep,
    unreferenced_files,
    views_without_samples,
    warm_up,
)

pytestmark = pytest.mark.slow  # 120 kills, 120 reruns: 5m50s wall, 4.6 CPU-min on 2 shared cores (load 1.5-3.4)

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "data" / "sample_crawl" / "crawl-data"
SEGMENTS = ("CC-MAIN-2020-34/1596439738015.38", "LEGACY-ARCHIVES/wget-2024")
SMALL, TWO_FILES = SEGMENTS  # 16 records in one WARC; 37 records in two WARCs (two tasks)
KILLS = 20
IN_COMMIT = 8  # of the KILLS points, how many fall inside a commit_partition call
AFTER_COMMIT = 4  # how many after the last commit returned (the rest before the first one started)
SEED = 20


def run_view_config(seed: int) -> dict:
    config = copy.deepcopy(DEMO_RUN_VIEW)
    config["ops"]["run_view__candidate"]["config"]["seed"] = seed
    return config


JOBS = {
    "raw": Job("raw", "raw_ingest", TWO_FILES),
    "curated": Job("curated", "curate", SMALL),
    "dedup": Job("dedup", "minhash", TWO_FILES),
    "tokenized": Job(
        "tokenized", "tokenize", dg.MultiPartitionKey({"tokenizer": DEMO_TOKENIZER, "segment": TWO_FILES})
    ),
    "quarantine": Job(
        "quarantine", "decontaminate", dg.MultiPartitionKey({"benchmark": "gsm8k", "segment": TWO_FILES})
    ),
    # the demo's candidate exists in the built lakehouse (a rerun of it writes nothing): drill a new one
    "run_view": Job("run_view", "run_view_candidate", None, run_view_config(seed=4321), fresh=True),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, pristine copy, crawl root): `tokenlake run` on two sample segments, in a subprocess (so this
    process holds no catalog connection to the files that the drills replace)."""
    base = tmp_path_factory.mktemp("drills")
    crawl, home = base / "crawl", base / "home"
    for key in SEGMENTS:
        crawl_name, segment = key.split("/")
        where = Path(crawl_name) / "segments" / segment
        shutil.copytree(SAMPLE / where, crawl / "crawl-data" / where)
    env = {**os.environ, "TOKENLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster")}
    env.pop("TOKENLAKE_CATALOG", None)
    cli = [sys.executable, "-m", "orchestration.cli", "run", "--crawl-root", str(crawl)]
    # below pytest-timeout's 600 s per-test guard, so a hung run fails here with its output (it takes ~1 min)
    done = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shutil.copytree(home, base / "pristine", symlinks=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENLAKE_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        mp.delenv("TOKENLAKE_CATALOG", raising=False)
        yield home, base / "pristine", crawl


def restore(home: Path, pristine: Path) -> None:
    shutil.rmtree(home)
    shutil.copytree(pristine, home, symlinks=True)


def kill_points(calibration: Outcome, seed: int) -> list[KillPoint]:
    """KILLS seeded points in three strata: before the first commit (planning, tasks writing files), inside a
    `commit_partition` call (before and after the catalog swap), after the last commit returned (the
    materialisation event, Dagster's bookkeeping), each counted from its anchor (see `KillPoint`)."""
    rng = random.Random(seed)
    windows = calibration.windows
    before = windows[0][0] - 1
    after = int((calibration.calls - windows[-1][1]) * 0.9)  # a margin: the bookkeeping varies a little
    points = [KillPoint("start", rng.randint(1, before)) for _ in range(KILLS - IN_COMMIT - AFTER_COMMIT)]
    for _ in range(IN_COMMIT):
        i = rng.randrange(len(windows))
        points.append(KillPoint("enter", rng.randint(1, windows[i][1] - windows[i][0]), i))
    points += [KillPoint("return", rng.randint(1, after)) for _ in range(AFTER_COMMIT)]
    return points


@pytest.mark.parametrize("state", list(JOBS))
def test_sigkill_at_seeded_points_leaves_no_partial_snapshot_and_no_orphan(built, state, tmp_path, capsys):
    home, pristine, crawl = built
    job = JOBS[state]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENLAKE_HOME", str(home))
        mp.setenv("DAGSTER_HOME", str(home / "dagster"))
        t0 = time.perf_counter()
        restore(home, pristine)
        warm_up(crawl, job)
        restore(home, pristine)
        lakehouse = fresh_lakehouse()
        before_ids = snapshot_ids(lakehouse)
        calibration = run_child(crawl, job, None, tmp_path / "report.json")  # an uninterrupted run
        written = sorted(k for k, v in snapshot_ids(lakehouse).items() if v != before_ids[k])
        assert written and not calibration.killed and calibration.windows, (written, calibration)
        expected = digests(lakehouse, written)
        if job.fresh:
            restore(home, pristine)
            lakehouse = fresh_lakehouse(lakehouse)
        before = digests(lakehouse, written)  # == expected unless the job adds something new (fresh)
        checked: set[int] = set()
        assert incomplete_snapshots(lakehouse, written, checked) == []
        points = kill_points(calibration, SEED + zlib.crc32(state.encode()))
        partial, orphans_removed, orphans_left, reaped, not_killed, landed = [], 0, 0, 0, 0, 0
        for at in points:
            if job.fresh:
                restore(home, pristine)
                lakehouse = fresh_lakehouse(lakehouse)
            ids = snapshot_ids(lakehouse)
            outcome = run_child(crawl, job, at, tmp_path / "report.json", len(calibration.windows))
            not_killed += not outcome.killed
            changed = sorted(k for k in written if snapshot_ids(lakehouse)[k] != ids[k])
            landed += bool(changed)  # the kill came after (at least one) commit
            with dg.DagsterInstance.get() as instance:
                reaped += len(reap_dead_runs(instance))
                partial += incomplete_snapshots(lakehouse, written, checked) + views_without_samples(lakehouse)
                now = {**before, **digests(lakehouse, changed)}  # an unchanged snapshot reads as before
                for ident in written:  # each table holds its partition as before the run or as after it
                    assert now[ident] in (before[ident], expected[ident]), f"{at}: {ident}"
                orphans_removed += sweep(lakehouse, written)
                left = [f for ident in written for f in unreferenced_files(lakehouse, ident)]
                orphans_left += len(left)
                assert left == [], f"after the kill at {at} the sweep left {left}"
            rerun = run_child(crawl, job, None, tmp_path / "report.json", count=False)  # as make demo runs it
            assert not rerun.killed
            assert digests(lakehouse, written) == expected, f"the rerun after the kill at {at} differs"
        partial += incomplete_snapshots(lakehouse, written, checked)
    seconds = time.perf_counter() - t0
    with capsys.disabled():
        print(
            f"\ndrill {state} ({job.name} {job.partition_key or 'all'}): {len(points)} SIGKILLs "
            f"({', '.join(f'{n} {a}' for a, n in sorted(Counter(p.anchor for p in points).items()))}; "
            f"calls {calibration.calls}), "
            f"{not_killed} finished first, {landed} after a commit, {reaped} dead runs reaped, "
            f"{len(checked)} snapshots checked, "
            f"partial {len(partial)}, orphans swept {orphans_removed}, left {orphans_left}, "
            f"tables {', '.join(written)}, {seconds:.0f} s"
        )
    assert not_killed == 0
    assert partial == []
    assert orphans_left == 0
    assert os.path.isdir(home)
