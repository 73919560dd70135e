"""Content digests of the lakehouse: what "same rows" means when comparing two builds.

Per table: the row count and a sha256 over its rows sorted, leaving out what legitimately varies between two
builds of the same inputs and config (processing times, Dagster run ids, snapshot ids, the absolute path of
the crawl directory; run view ids and manifest hashes, which embed the pinned snapshot ids). Two lakehouses
built from the same crawl with the same configuration have equal digests whatever the executor, the task
grouping, the catalog or the storage. The run view samples digests (`samples.sha256` of each manifest) are
reported on their own: they contain no snapshot id.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import PurePosixPath

import pyarrow as pa

from iceberg_catalog.lakehouse import Lakehouse
from iceberg_catalog.schemas import RUN_VIEW_MANIFESTS, TABLES, TableDef

VARYING_COLUMNS = frozenset(
    {
        "ingested_at",
        "screened_at",
        "created_at",
        "decided_at",
        "completed_at",
        "added_at",  # quarantine.benchmark_sources: when a benchmark was registered
        "original",  # quarantine.benchmark_sources: the path it was registered from
        "extract_seconds",
        "dagster_run_id",
        "created_by_run_id",
        "decided_by_run_id",
        "propagated_by_run_id",
        "eval_items_snapshot_id",
        "curated_snapshot_id",
        "manifest_json",
        "manifest_sha256",
        "run_view_id",
    }
)
PATH_COLUMNS = frozenset({"warc_file"})  # compared by file name: the crawl directory differs between machines


def rows_digest(data: pa.Table) -> str:
    """sha256 of the rows of `data`, independent of row order and of how the table is chunked."""
    lines = sorted(json.dumps([repr(v) for v in row.values()]) for row in data.to_pylist())
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def comparable(data: pa.Table) -> pa.Table:
    """The columns of `data` that must be equal between builds (file names instead of paths)."""
    keep = [c for c in data.column_names if c not in VARYING_COLUMNS]
    data = data.select(keep)
    for c in PATH_COLUMNS & set(keep):
        names = [None if p is None else PurePosixPath(p).name for p in data[c].to_pylist()]
        data = data.set_column(keep.index(c), c, pa.array(names, pa.string()))
    return data


def table_digest(lakehouse: Lakehouse, t: TableDef) -> dict:
    """{"rows": n, "sha256": digest} of the table's current snapshot ("empty" when never written)."""
    snapshot = lakehouse.snapshot_id(t)
    if snapshot is None:
        return {"rows": 0, "sha256": "empty"}
    data = comparable(lakehouse.scan_at(t, snapshot))
    return {"rows": data.num_rows, "sha256": rows_digest(data)}


def lakehouse_digest(lakehouse: Lakehouse, tables: Mapping[str, TableDef] = TABLES) -> dict:
    """Every declared table's digest plus the samples digest of every run view, sorted."""
    out: dict = {ident: table_digest(lakehouse, t) for ident, t in sorted(tables.items())}
    manifests = lakehouse.scan(RUN_VIEW_MANIFESTS, ("manifest_json",))
    out["run_view.samples_digest"] = sorted(
        json.loads(m)["samples"]["sha256"] for m in manifests["manifest_json"].to_pylist()
    )
    return out
