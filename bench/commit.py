"""What one partition commit costs as a table's history grows: pyiceberg's own Transaction against ours
(`iceberg_catalog.transaction`, pending metadata computed once per staged change), same table, same run.

A partition commit is `commit_partition`: delete the partition, add its files, provenance on the snapshot, in
one transaction; every commit adds two snapshots, as every materialisation of a curate, tokenize or ingest
partition does. The table (embedded SQLite catalog in a temp dir) grows to each of --at snapshots; there, both
sides commit --repeats times, interleaved, and the median CPU seconds (process_time) of a commit is compared.

    python bench/commit.py [--at 50 200 800] [--repeats 5] [--json]

`--json` prints one JSON object on its own line: {"points": [{"snapshots", "pyiceberg_s", "ours_s", "ratio"}]}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rows(schema, n: int):
    """`n` rejected-record rows of one partition (what the commit carries does not matter, only its history)."""
    import datetime

    import pyarrow as pa

    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cols = {"crawl": "c", "segment": "s", "warc_file": "f", "warc_length": 1, "reason": "bench", "ingested_at": now}
    data = [{**cols, "warc_offset": i} for i in range(n)]
    return pa.Table.from_pylist(data, schema=schema)


def measure(work: Path, at: list[int], repeats: int) -> list[dict]:
    from pyiceberg.table import Transaction

    import iceberg_catalog.commit as commit_module
    from iceberg_catalog import CatalogConfig, Lakehouse, Provenance, config_hash
    from iceberg_catalog.schemas import RAW_REJECTED_RECORDS as T
    from iceberg_catalog.transaction import transaction as ours

    lakehouse = Lakehouse(CatalogConfig.embedded(work))
    part = {"crawl": "c", "segment": "s"}
    writer = lakehouse.writer(T, part)
    writer.write(rows(T.arrow_schema, 100))
    writer.commit(Provenance("raw/rejected_records", "c/s", "seed", "bench", config_hash({})))
    files = [t.file.file_path for t in lakehouse.table(T).scan().plan_files()]

    def commit(i: int) -> float:
        prov = Provenance("raw/rejected_records", "c/s", f"run-{i}", "bench", config_hash({"i": i}))
        cpu = time.process_time()
        commit_module.commit_partition(lakehouse.catalog, T.identifier, part, files, prov)
        return time.process_time() - cpu

    points, i = [], 0
    for target in sorted(at):
        while len(lakehouse.table(T).metadata.snapshots) < target:
            commit_module.transaction, i = ours, i + 1
            commit(i)
        times: dict[str, list[float]] = {"pyiceberg": [], "ours": []}
        snapshots = len(lakehouse.table(T).metadata.snapshots)
        for _ in range(repeats):
            for side, tx in (("pyiceberg", Transaction), ("ours", ours)):
                commit_module.transaction, i = tx, i + 1
                times[side].append(commit(i))
        a, b = statistics.median(times["pyiceberg"]), statistics.median(times["ours"])
        points.append(
            {"snapshots": snapshots, "pyiceberg_s": round(a, 4), "ours_s": round(b, 4), "ratio": round(a / b, 2)}
        )
        print(
            f"{snapshots:5d} snapshots: pyiceberg {a * 1e3:7.1f} ms, ours {b * 1e3:7.1f} ms CPU a commit "
            f"(ours {a / b:.1f}x faster)",
            file=sys.stderr,
            flush=True,
        )
    commit_module.transaction = ours
    return points


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--at", type=int, nargs="+", default=[50, 200, 800], help="history lengths (snapshots)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore", message="Delete operation did not match")
    with tempfile.TemporaryDirectory(prefix="tokenlake-bench-commit-") as tmp:
        points = measure(Path(tmp), args.at, args.repeats)
    if args.json:
        print(json.dumps({"points": points}))
    else:
        for p in points:
            print(f"{p['snapshots']} snapshots: {p['pyiceberg_s']} s -> {p['ours_s']} s a commit ({p['ratio']}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
