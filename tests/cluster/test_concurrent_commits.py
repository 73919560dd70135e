"""Concurrent backfills against PostgreSQL lose no commit: two Dagster processes (the way two backfill runs of a
pool raised above 1 run) materialise different partitions of the raw tables at the same time, each partition
several times, on one PostgreSQL catalog with an S3 warehouse. PostgreSQL catalogs take no OS lock: a
conflicting commit fails in the catalog (`CommitFailedException`) and is retried on the new table state (by
pyiceberg's own commit retry, then by `commit_partition`'s). Every run's commit is in the table's history
(counted by run id), and the rows equal one serial ingest. A commit storm after the runs (the same committer,
both processes on the same 0.5 s ticks) makes the collisions certain; the test fails if none happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest
import yaml

from iceberg_catalog import CatalogConfig, Lakehouse
from iceberg_catalog.commit import Provenance
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
from orchestration.local_cluster.servers import stop
from tests.cluster.servers import postgres, seaweedfs  # noqa: F401 - fixtures
from tests.conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_segments

pytestmark = pytest.mark.slow

REPEAT = 3  # each process materialises each of its partitions this many times
STORM = 5  # then re-commits each of them this many times, back to back

# One backfill "run worker": its own Dagster instance and process, the raw_ingest job per partition, REPEAT x.
CHILD = """
import json, logging, sys
import dagster as dg

class Conflicts(logging.Handler):  # pyiceberg retries a commit that lost a race itself, and says so
    n = 0
    def emit(self, record):
        Conflicts.n += "concurrent update" in record.getMessage()

logging.getLogger("pyiceberg.table").addHandler(Conflicts(logging.WARNING))
from orchestration.definitions import build_defs
from orchestration.demo import discover_segments

keys, repeat = json.loads(sys.argv[1]), int(sys.argv[2])
defs = build_defs(sys.argv[3])
job = defs.resolve_job_def("raw_ingest")
with dg.DagsterInstance.ephemeral() as instance:
    discover_segments(defs, instance)
    for _ in range(repeat):
        for key in keys:
            res = job.execute_in_process(instance=instance, partition_key=key, raise_on_error=True)
            meta = res.asset_materializations_for_node("raw_warc_ingest")[0].metadata
            print("RUN", res.run_id, meta["iceberg_commit_attempts"].value, flush=True)

# then a commit storm: the same committer every asset uses, re-committing this process's partitions back to
# back, so that the two processes' commits certainly collide
import os
from iceberg_catalog import Lakehouse
from iceberg_catalog.commit import Provenance, commit_partition, partition_filter
from iceberg_catalog.schemas import RAW_WARC_RECORDS as T
lakehouse = Lakehouse()
parts = [dict(zip(("crawl", "segment"), key.split("/"))) for key in keys]
files = {key: [t.file.file_path for t in lakehouse.table(T).scan(row_filter=partition_filter(part)).plan_files()]
         for key, part in zip(keys, parts)}
import math, pathlib, time
barrier = pathlib.Path(sys.argv[5])
(barrier / str(os.getpid())).touch()
deadline = time.monotonic() + 300
while len(list(barrier.iterdir())) < 2:  # both processes reach the storm before it starts
    if time.monotonic() > deadline:
        sys.exit("the other process never reached the storm")
    time.sleep(0.05)
for i in range(int(sys.argv[4])):
    for key, part in zip(keys, parts):
        time.sleep(math.ceil(time.time() / 0.5) * 0.5 - time.time())  # both commit on the same 0.5 s ticks
        run = f"storm-{os.getpid()}-{i}-{key}"
        prov = Provenance("raw/warc_records", key, run, "storm", "storm")
        done = commit_partition(lakehouse.catalog, T.identifier, part, files[key], prov,
                                catalog_fingerprint=lakehouse.lock_key)
        print("RUN", run, done.attempts, flush=True)
print("CONFLICTS", Conflicts.n, flush=True)
"""


def reference_digests(tmp_path, monkeypatch) -> dict[str, dict]:
    """The raw tables after one serial in-process ingest of every sample segment (embedded catalog)."""
    monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / "ref"))
    monkeypatch.delenv("TOKENLAKE_CATALOG", raising=False)
    with dg.instance_for_test() as instance:
        materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS)
    lakehouse = Lakehouse(CatalogConfig.embedded(tmp_path / "ref"))
    return {t.identifier: table_digest(lakehouse, t) for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)}


def test_two_concurrent_backfills_on_postgres_lose_no_commit(tmp_path, monkeypatch, postgres, seaweedfs):  # noqa: F811
    want = reference_digests(tmp_path, monkeypatch)
    props = seaweedfs.sql_catalog_properties(postgres.sqlalchemy_uri, "wh-concurrent")
    cfg = tmp_path / "catalog.yaml"
    cfg.write_text(yaml.safe_dump({"name": "tokenlake", "properties": props}))
    env = {**os.environ, "TOKENLAKE_CATALOG": str(cfg), "TOKENLAKE_HOME": str(tmp_path / "home")}
    halves = [list(SAMPLE_KEYS[0::2]), list(SAMPLE_KEYS[1::2])]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    logs = [(tmp_path / f"child{i}.out", tmp_path / f"child{i}.err") for i in range(len(halves))]
    procs = [  # output to files, not pipes: a full pipe would stall one child while the other waits for it
        subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(keys), str(REPEAT), str(SAMPLE_CRAWL), str(STORM), str(barrier)],
            env=env,
            stdout=out.open("w"),
            stderr=err.open("w"),
        )  # fmt: skip
        for keys, (out, err) in zip(halves, logs)
    ]
    try:
        for p in procs:
            p.wait(timeout=600)
    finally:  # a child still running when its wait ended (its timeout or the suite's hang guard) is stopped
        for p in procs:
            stop(p, grace=10)
    outs = [(out.read_text(), err.read_text()) for out, err in logs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    run_ids = {line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("RUN ")}
    storm = {r for r in run_ids if r.startswith("storm-")}
    # each process ingests and storms its own half of the segments
    assert len(run_ids) - len(storm) == len(SAMPLE_KEYS) * REPEAT and len(storm) == len(SAMPLE_KEYS) * STORM
    attempts = [int(line.split()[2]) for out, _ in outs for line in out.splitlines() if line.startswith("RUN ")]

    monkeypatch.setenv("TOKENLAKE_CATALOG", str(cfg))
    lakehouse = Lakehouse(CatalogConfig.resolve())
    for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS):
        table = lakehouse.table(t)
        committed = {Provenance.from_snapshot_summary(s.summary.additional_properties).get("dagster-run-id")
                     for s in table.snapshots()}  # fmt: skip
        ran = run_ids if t is RAW_WARC_RECORDS else run_ids - storm  # the storm re-commits warc_records only
        assert ran <= committed, f"{t.identifier}: commits of runs {sorted(ran - committed)} are lost"
        assert table_digest(lakehouse, t) == want[t.identifier]
    retried = sum(a - 1 for a in attempts) + sum(
        int(line.split()[1]) for out, _ in outs for line in out.splitlines() if line.startswith("CONFLICTS ")
    )
    assert retried > 0, "no two commits collided: the test did not exercise the catalog's conflict detection"
    print(f"{len(run_ids)} runs from 2 concurrent processes; every commit kept; {retried} conflicting commits retried")
