"""MinHash signatures and LSH bands of a segment as plan -> task -> commit: one task per slice of the segment's
kept documents, one commit per table. No Dagster.

`plan` pins `curated.documents` at one snapshot and cuts the segment's kept documents into slices of
`files_per_slice` data files; `run_task` streams its slice in batches of `batch_docs` documents, computes the
signatures and band hashes and writes them to Parquet data files of `dedup.minhash_signatures` and
`dedup.minhash_bands` (per batch, one row group per band sorted by band_hash then doc_id, so band scans skip
row groups); `commit` replaces the segment's partition of both tables, each in one transaction, with every
task's files in plan order. Every row is a function of one document, so the tables do not depend on the
slicing, the batching, the worker count or which task finished first.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import And, EqualTo

from assets.dedup.minhash import MinHashParams, band_hashes, is_empty_signature, signature_to_bytes, signatures
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TableDef, TaskOutput, TaskResult
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES

TABLES = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES)


@dataclass(frozen=True)
class SignatureParams(MinHashParams):
    """FineWeb's MinHash settings (the `MinHashParams` fields, which alone change what is stored) plus how the
    work is cut."""

    batch_docs: int = knob(
        2000, "documents hashed and written together (bounds memory; one row group per band per batch)"
    )
    workers: int = knob(1, "processes computing one task's signatures (the output does not depend on it)")
    files_per_slice: int = knob(
        1, "curated.documents data files per task: the unit an executor runs (the output does not depend on it)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_docs", "workers", "files_per_slice"):
            if getattr(self, name) < 1:
                raise ValueError(f"SignatureParams.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def minhash(self) -> MinHashParams:
        """The MinHash settings alone: what the signatures and band hashes are a function of."""
        return MinHashParams(**{f.name: getattr(self, f.name) for f in dataclasses.fields(MinHashParams)})

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash)."""
        return dataclasses.asdict(self.minhash)


@dataclass(frozen=True)
class SignatureTask:
    """Hash the kept documents of one slice of a segment into the two outputs."""

    index: int
    lakehouse: Lakehouse
    slice: ScanSlice
    crawl: str
    segment: str
    params: SignatureParams
    bands_out: TaskOutput
    signatures_out: TaskOutput


def kept_documents(crawl: str, segment: str):
    """The row filter of a segment's kept documents (what is hashed)."""
    return And(EqualTo("crawl", crawl), And(EqualTo("segment", segment), EqualTo("kept", True)))


def plan(
    lakehouse: Lakehouse, crawl: str, segment: str, documents_snapshot: int | None, params: SignatureParams, run: str
) -> list[SignatureTask]:
    """One task per `params.files_per_slice` data files of the segment's kept documents at `documents_snapshot`
    (none when the segment has no kept document or curated.documents was never written)."""
    partition = {"crawl": crawl, "segment": segment}
    slices = lakehouse.slices(
        CURATED_DOCUMENTS,
        documents_snapshot,
        kept_documents(crawl, segment),
        ("doc_id", "text"),
        params.files_per_slice,
    )
    return [
        SignatureTask(
            i,
            lakehouse,
            s,
            crawl,
            segment,
            params,
            lakehouse.output(DEDUP_MINHASH_BANDS, partition, run, i),
            lakehouse.output(DEDUP_MINHASH_SIGNATURES, partition, run, i),
        )
        for i, s in enumerate(slices)
    ]


def run_task(task: SignatureTask) -> TaskResult:
    """Signatures and band hashes of the slice's documents, written as data files; never commits. Stats:
    documents hashed, documents without shingles (no signature, no bands: they would match each other)."""
    p, minhash = task.params, task.params.minhash
    bands_writer, sigs_writer = FileWriter(task.bands_out), FileWriter(task.signatures_out)
    hashed = empty = 0
    pool = ProcessPoolExecutor(p.workers, mp_context=get_context("spawn")) if p.workers > 1 else None
    try:
        for batch in rebatch(task.lakehouse.read_slice(task.slice), p.batch_docs):
            sigs = parallel_signatures(batch["text"].to_pylist(), minhash, pool, p.workers)
            nonempty = [k for k, sig in enumerate(sigs) if not is_empty_signature(sig)]
            empty += len(sigs) - len(nonempty)
            ids = batch["doc_id"].take(pa.array(nonempty, pa.int64())).to_pylist()
            hashed += len(ids)
            for table in band_tables(ids, sigs[nonempty], task.crawl, task.segment, minhash):
                bands_writer.write(table)
            sigs_writer.write(signature_table(ids, sigs[nonempty], task.crawl, task.segment))
    finally:
        if pool is not None:
            pool.shutdown()
    return TaskResult(
        task.index,
        (bands_writer.close(), sigs_writer.close()),
        {"documents": hashed, "documents_without_shingles": empty},
    )


def commit(
    lakehouse: Lakehouse,
    crawl: str,
    segment: str,
    results: Sequence[TaskResult],
    provenance: Mapping[TableDef, Provenance],
) -> dict[TableDef, CommitResult]:
    """Replace the segment's partition of both tables with the tasks' files (one transaction each)."""
    partition = {"crawl": crawl, "segment": segment}
    return lakehouse.commit(results, {t: partition for t in TABLES}, provenance)


def totals(results: Iterable[TaskResult]) -> dict[str, int]:
    """The tasks' stats summed (order-independent)."""
    out = {"documents": 0, "documents_without_shingles": 0}
    for r in results:
        for k in out:
            out[k] += int(r.stats[k])
    return out


# --- the task's steps ---------------------------------------------------------------------------------------


def band_tables(
    ids: list[str], sigs: np.ndarray, crawl: str, segment: str, params: MinHashParams
) -> Iterator[pa.Table]:
    """The band rows of some documents, one table per band (each written as its own row group), sorted by
    band_hash then doc_id: a band scan skips every other band's row groups by their statistics."""
    n = len(ids)
    hashes = np.array([band_hashes(s, params) for s in sigs], dtype=np.int64).reshape(n, params.bands)
    for b in range(params.bands):
        yield pa.table(
            {
                "doc_id": ids,
                "crawl": [crawl] * n,
                "segment": [segment] * n,
                "band": pa.array(np.full(n, b, np.int32)),
                "band_hash": hashes[:, b],
            }
        ).sort_by([("band_hash", "ascending"), ("doc_id", "ascending")])


def signature_table(ids: list[str], sigs: np.ndarray, crawl: str, segment: str) -> pa.Table:
    n = len(ids)
    return pa.table(
        {
            "doc_id": ids,
            "crawl": [crawl] * n,
            "segment": [segment] * n,
            "signature": [signature_to_bytes(s) for s in sigs],
        }
    )


def parallel_signatures(
    texts: list, params: MinHashParams, pool: ProcessPoolExecutor | None, workers: int
) -> np.ndarray:
    """Signatures of `texts`, split across `pool` in contiguous chunks (same rows in the same order)."""
    if pool is None or len(texts) < 2 * workers:
        return signatures(texts, params)
    step = -(-len(texts) // workers)
    parts = pool.map(signatures, [texts[i : i + step] for i in range(0, len(texts), step)], [params] * workers)
    return np.concatenate(list(parts))


def rebatch(batches: Iterable[pa.RecordBatch], size: int) -> Iterator[pa.Table]:
    """Re-chunk a stream of record batches into tables of at most `size` rows."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        while batch.num_rows:
            take = batch.slice(0, size - rows)
            pending.append(take)
            rows += take.num_rows
            batch = batch.slice(take.num_rows)
            if rows >= size:
                yield pa.Table.from_batches(pending)
                pending, rows = [], 0
    if rows:
        yield pa.Table.from_batches(pending)
