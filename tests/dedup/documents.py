"""Kept documents in curated.documents without running raw and curated: real texts and near-duplicate variants
(tests/dedup/labelled.py), written straight into a lakehouse as several data files per segment."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence

import pyarrow as pa

from iceberg_catalog import FileWriter, Lakehouse, Provenance, TaskResult, config_hash
from iceberg_catalog.schemas import CURATED_DOCUMENTS
from tests.dedup.labelled import build_labelled_set


def doc_id(text: str, salt: str = "") -> str:
    return hashlib.sha256(f"{salt}|{text}".encode()).hexdigest()[:32]


def write_documents(
    lakehouse: Lakehouse,
    crawl: str,
    segment: str,
    docs: Sequence[tuple[str, str | None, bool]],
    files: int = 3,
    language: str | None = None,
) -> int:
    """Replace the segment's partition of curated.documents with `docs` ((doc_id, text, kept), in order) cut
    into `files` data files, every one in `language`; the new snapshot id."""
    partition = {"crawl": crawl, "segment": segment}
    rows = [
        {
            "doc_id": d,
            "record_id": d,
            "deletion_key": d,
            "crawl": crawl,
            "segment": segment,
            "url": f"https://example.org/{d}",
            "kept": kept,
            "text": text,
            "language": language,
        }
        for d, text, kept in docs
    ]
    run, step, results = uuid.uuid4().hex, -(-len(rows) // files), []
    for i in range(files):
        writer = FileWriter(lakehouse.output(CURATED_DOCUMENTS, partition, run, i))
        writer.write(pa.Table.from_pylist(rows[i * step : (i + 1) * step], schema=CURATED_DOCUMENTS.arrow_schema))
        results.append(TaskResult(i, (writer.close(),)))
    prov = Provenance("curated/documents", f"{crawl}/{segment}", run, "test", config_hash({}))
    return lakehouse.commit(results, {CURATED_DOCUMENTS: partition}, {CURATED_DOCUMENTS: prov})[
        CURATED_DOCUMENTS
    ].snapshot_id


def two_crawls(lakehouse: Lakehouse, files: int = 3) -> dict[str, list[str]]:
    """CRAWL-A/s: 24 real documents, a wordless one and a dropped one (kept=False: not hashed); CRAWL-B/s: 15
    edited variants of each of two of them (5-40% of their sentences deleted, inserted or replaced).
    {crawl: kept texts}."""
    data = build_labelled_set(n_base=24, n_families=2, seed=0)
    base, variants = data.texts[: data.n_base], data.texts[data.n_base :]
    a = [(doc_id(t, "A"), t, True) for t in base] + [
        (doc_id("!!!", "A"), "!!! ...", True),
        (doc_id("dropped", "A"), variants[0], False),
    ]
    b = [(doc_id(t, "B"), t, True) for t in variants]
    write_documents(lakehouse, "CRAWL-A", "s", a, files)
    write_documents(lakehouse, "CRAWL-B", "s", b, files)
    return {"CRAWL-A": [t for _, t, k in a if k], "CRAWL-B": [t for _, t, _ in b]}
