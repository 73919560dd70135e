"""Upstream partitions written straight into a real lakehouse, in as many data files as a test asks for, so a
state's plan can be cut into one task or several without running the states above it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import pyarrow as pa

from iceberg_catalog import FileWriter, Lakehouse, Provenance, TableDef, TaskResult
from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES

PROVENANCE = Provenance("test/upstream", None, "test", "test", "test")


def write_partition(
    lakehouse: Lakehouse, t: TableDef, partition: Mapping[str, str], rows: Sequence[dict], files: int = 1
) -> None:
    """Replace `partition` of `t` with `rows`, in that order, cut into `files` data files (one commit)."""
    step = max(1, -(-len(rows) // files))
    results = []
    for i, start in enumerate(range(0, len(rows), step)):
        writer = FileWriter(lakehouse.output(t, partition, "upstream", i))
        writer.write(pa.Table.from_pylist(list(rows[start : start + step]), schema=t.arrow_schema))
        results.append(TaskResult(i, (writer.close(),)))
    lakehouse.commit(results, {t: partition}, {t: PROVENANCE})


def curated_rows(texts: Sequence[str], crawl: str, segment: str, not_kept: Sequence[int] = ()) -> list[dict]:
    """Rows of curated.documents for `texts` (doc ids d000, d001, ...); the rows at `not_kept` were dropped."""
    rows = []
    for i, text in enumerate(texts):
        doc_id = f"d{i:03d}"
        rows.append(
            {
                "doc_id": doc_id,
                "record_id": f"r{i:03d}",
                "deletion_key": f"k{i:03d}",
                "crawl": crawl,
                "segment": segment,
                "url": f"https://en.wikipedia.org/{doc_id}",
                "host": "en.wikipedia.org",
                "kept": i not in not_kept,
                "decision": "too_short" if i in not_kept else None,
                "text": text,
                "text_sha256": hashlib.sha256(text.encode()).hexdigest(),
                "language": "en",
                "ppl_bucket": ("head", "middle", "tail")[i % 3],
            }
        )
    return rows


def write_curated(
    lakehouse: Lakehouse,
    rows: Sequence[dict],
    files: int,
    exact: Sequence[str] = (),
    near: Sequence[str] = (),
    canonical: Sequence[str] = (),
) -> None:
    """curated.documents in `files` files, plus exact duplicates `exact` and near duplicates `near` (with a
    decision) and `canonical` (a cluster's kept document, no decision) in the dedup tables."""
    crawl, segment = rows[0]["crawl"], rows[0]["segment"]
    write_partition(lakehouse, CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment}, rows, files)
    first = rows[0]["doc_id"]
    write_partition(
        lakehouse,
        CURATED_EXACT_DUPLICATES,
        {"crawl": crawl},
        [
            {
                "doc_id": d,
                "crawl": crawl,
                "segment": segment,
                "decision": "exact_duplicate",
                "duplicate_of": first,
                "duplicate_of_crawl": crawl,
                "text_sha256": "x",
            }
            for d in exact
        ],
    )
    write_partition(
        lakehouse,
        DEDUP_NEAR_DUPLICATES,
        {"crawl": crawl},
        [
            {
                "doc_id": d,
                "crawl": crawl,
                "segment": segment,
                "decision": None if d in canonical else "near_duplicate",
                "cluster_id": first,
                "cluster_size": 2,
                "duplicate_of": None if d in canonical else first,
            }
            for d in (*near, *canonical)
        ],
    )
