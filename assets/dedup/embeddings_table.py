"""Embeddings as data: each kept English document of a segment embedded once (`assets.embeddings.embed`) and
stored in `dedup.embeddings` as plan -> task -> commit, like the MinHash signatures (signatures.py). No Dagster.

`plan` pins `curated.documents` and cuts the segment's kept documents in `SEMANTIC_LANGUAGES` into slices of
`files_per_slice` data files; `run_task` embeds its slice in batches of `batch_docs` and writes one row per
document: the vector as float16 (measured on the 219 clean web pages of data/quarantine_background/: largest
cosine error against float32 1.4e-4 over their 23,871 pairs; int8 with a per-row scale: 3.0e-3), with the model
id and the sha256 of its weights. `commit` replaces the segment's partition in one transaction. A row is a
function of one document and the model (embed() gives a text the same bits alone or in any batch), so the table
depends on neither the slicing nor the batching.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import And, EqualTo, In

from assets.dedup.signatures import rebatch
from assets.embeddings import EMBEDDING_MODEL, embed, model_sha256
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, ScanSlice, TableDef, TaskOutput, TaskResult
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_EMBEDDINGS

# curated.documents.language values whose documents are embedded and linked: wordllama's embeddings are English
# (5 of the 9 unrelated web-page pairs above the threshold were pages in other languages mapped close together)
SEMANTIC_LANGUAGES = frozenset({"en"})
VECTOR_DTYPE = np.dtype("<f2")  # stored vectors: float16 little-endian


@dataclass(frozen=True)
class EmbeddingParams:
    """How a segment's documents are embedded (only the model changes the rows; the rest cuts the work)."""

    batch_docs: int = knob(2000, "documents embedded and written together (bounds memory)")
    files_per_slice: int = knob(1, "curated.documents data files per task (the output does not depend on it)")

    def __post_init__(self) -> None:
        for name in ("batch_docs", "files_per_slice"):
            if getattr(self, name) < 1:
                raise ValueError(f"EmbeddingParams.{name} must be >= 1, got {getattr(self, name)}")

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash)."""
        return {
            "model": EMBEDDING_MODEL,
            "model_sha256": model_sha256(),
            "dtype": VECTOR_DTYPE.str,
            "languages": sorted(SEMANTIC_LANGUAGES),
        }


@dataclass(frozen=True)
class EmbeddingTask:
    """Embed the kept English documents of one slice of a segment."""

    index: int
    lakehouse: Lakehouse
    slice: ScanSlice
    crawl: str
    segment: str
    params: EmbeddingParams
    out: TaskOutput


def embedded_documents(crawl: str, segment: str):
    """The row filter of a segment's documents that are embedded: kept, in a semantic language."""
    where = And(EqualTo("kept", True), In("language", sorted(SEMANTIC_LANGUAGES)))
    return And(EqualTo("crawl", crawl), And(EqualTo("segment", segment), where))


def plan(
    lakehouse: Lakehouse, crawl: str, segment: str, documents_snapshot: int | None, params: EmbeddingParams, run: str
) -> list[EmbeddingTask]:
    """One task per `params.files_per_slice` data files of the segment's embedded documents."""
    where, out = embedded_documents(crawl, segment), {"crawl": crawl, "segment": segment}
    slices = lakehouse.slices(CURATED_DOCUMENTS, documents_snapshot, where, ("doc_id", "text"), params.files_per_slice)
    return [
        EmbeddingTask(i, lakehouse, s, crawl, segment, params, lakehouse.output(DEDUP_EMBEDDINGS, out, run, i))
        for i, s in enumerate(slices)
    ]


def run_task(task: EmbeddingTask) -> TaskResult:
    """The slice's vectors written as data files; never commits. Stats: documents embedded."""
    writer, embedded, sha = FileWriter(task.out), 0, model_sha256()
    for batch in rebatch(task.lakehouse.read_slice(task.slice), task.params.batch_docs):
        vectors = embed([t or "" for t in batch["text"].to_pylist()])
        writer.write(embedding_table(batch["doc_id"].to_pylist(), vectors, task.crawl, task.segment, sha))
        embedded += batch.num_rows
    return TaskResult(task.index, (writer.close(),), {"documents": embedded})


def commit(
    lakehouse: Lakehouse, crawl: str, segment: str, results: Sequence[TaskResult], provenance: Provenance
) -> dict[TableDef, CommitResult]:
    """Replace the segment's partition with the tasks' files (one transaction)."""
    partition = {"crawl": crawl, "segment": segment}
    return lakehouse.commit(results, {DEDUP_EMBEDDINGS: partition}, {DEDUP_EMBEDDINGS: provenance})


def totals(results: Iterable[TaskResult]) -> dict[str, int]:
    """The tasks' stats summed (order-independent)."""
    return {"documents": sum(int(r.stats["documents"]) for r in results)}


# --- the rows -------------------------------------------------------------------------------------------------


def embedding_table(ids: list[str], vectors: np.ndarray, crawl: str, segment: str, sha: str) -> pa.Table:
    """Rows of dedup.embeddings for some documents of one segment."""
    n = len(ids)
    return pa.table(
        {
            "doc_id": ids,
            "crawl": [crawl] * n,
            "segment": [segment] * n,
            "model": [EMBEDDING_MODEL] * n,
            "model_sha256": [sha] * n,
            "vector": vectors_to_binary(vectors),
        }
    )


def vectors_to_binary(vectors: np.ndarray) -> pa.Array:
    """Each row as float16 little-endian bytes (a NaN row, from an empty text, stays NaN)."""
    rows = np.ascontiguousarray(vectors, dtype=VECTOR_DTYPE)
    width = rows.shape[1] * VECTOR_DTYPE.itemsize if rows.ndim == 2 else 0
    offsets = pa.py_buffer(np.arange(len(rows) + 1, dtype=np.int32) * width)
    return pa.Array.from_buffers(pa.binary(), len(rows), [None, offsets, pa.py_buffer(rows.tobytes())])


def vectors_from_binary(column: pa.Array | pa.ChunkedArray, dtype: np.dtype = VECTOR_DTYPE) -> np.ndarray:
    """The float32 (n, dim) matrix of a column of stored vectors (all of one width)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks else pa.array([], pa.binary())
    column = column.cast(pa.large_binary())  # Iceberg reads binary as large_binary: one offset width for both
    n = len(column)
    if n == 0:
        return np.zeros((0, 0), np.float32)
    offsets = np.frombuffer(column.buffers()[1], np.int64)[column.offset : column.offset + n + 1]
    widths = np.diff(offsets)
    if (widths != widths[0]).any() or widths[0] % dtype.itemsize:
        raise ValueError(f"stored vectors must all have one width in whole {dtype} values, got widths {set(widths)}")
    data = np.frombuffer(column.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return data.view(dtype).reshape(n, -1).astype(np.float32)
