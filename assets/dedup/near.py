"""Near-duplicate clusters over every materialised segment as plan -> run -> commit. No Dagster.

`plan` pins the three input tables at one snapshot each, reads the document index (every hashed document, in
canonical (crawl, doc_id) order) and lists one task per band; `run` finds the candidate pairs band by band
(only one band's hashes in memory at a time), verifies them, clusters them crawl by crawl and writes the
rows of `dedup.near_duplicates` as data files; `commit` replaces the table in one transaction.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import EqualTo, In

from assets.dedup.clustering import (
    DECISION_NEAR_DUPLICATE,
    Clusters,
    band_candidate_pairs,
    cluster_crawl_ordered,
    merge_edges,
    verify_edges,
)
from assets.dedup.minhash import (
    MinHashParams,
    estimated_jaccard,
    exact_jaccard,
    shingles,
    signature_from_bytes,
)
from assets.knobs import knob
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, TaskOutput, TaskResult
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
    DEDUP_NEAR_DUPLICATES,
)

INPUTS = (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES, CURATED_DOCUMENTS)
Verify = Literal["exact", "estimated", "none"]
VERIFY_MODES: tuple[str, ...] = get_args(Verify)


@dataclass(frozen=True)
class NearDuplicateParams:
    """Documents sharing a band are candidates; `verify` keeps a candidate pair when its similarity reaches
    `threshold`: "exact" = Jaccard of the two documents' shingle sets (reads their texts; precision 1 by
    construction), "estimated" = fraction of equal MinHash rows (cheaper; ~0.83 precision / 0.87 recall at
    0.8 with 14x8, see tests/dedup/test_minhash_quality.py), "none" = every candidate pair."""

    threshold: float = knob(
        0.8, "a candidate pair is a near duplicate when its similarity reaches this (FineWeb's 0.8)"
    )
    verify: Verify = knob("exact", "how candidate pairs are verified: exact | estimated | none")
    n_grams: int = knob(
        MinHashParams().n_grams,
        "words per shingle for verify=exact: must match "
        "dedup/minhash_bands' n_grams (its shingles are what the bands hash)",
    )

    def __post_init__(self) -> None:
        if self.verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {' | '.join(VERIFY_MODES)}, got {self.verify!r}")
        if self.n_grams < 1:
            raise ValueError(f"n_grams must be >= 1, got {self.n_grams}")

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash)."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class DocumentIndex:
    """Every hashed document in canonical order, (crawl, doc_id) ascending: a document's index is its
    position here (Arrow arrays: ~40 bytes a document, no Python objects). Crawl k owns the indices
    [crawl_starts[k], crawl_starts[k + 1])."""

    doc_ids: pa.Array
    crawls: pa.Array
    segments: pa.Array
    crawl_starts: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.doc_ids)

    def positions(self, doc_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The index of each of `doc_ids` (int64)."""
        return pc.index_in(doc_ids, value_set=self.doc_ids).to_numpy(zero_copy_only=False).astype(np.int64)


@dataclass(frozen=True)
class BandTask:
    """Candidate pairs of one band: documents sharing its hash."""

    band: int
    lakehouse: Lakehouse
    snapshot_id: int


@dataclass(frozen=True)
class NearDuplicatePlan:
    """Everything `run` needs: the pinned inputs, the document index, the band tasks, where to write."""

    lakehouse: Lakehouse
    params: NearDuplicateParams
    snapshot_ids: Mapping[str, int | None]  # of INPUTS, read once: everything reads at these
    index: DocumentIndex
    bands: tuple[BandTask, ...]
    out: TaskOutput


def plan(lakehouse: Lakehouse, params: NearDuplicateParams, run: str) -> NearDuplicatePlan:
    """Pin the inputs, read the document index, one task per band present in dedup.minhash_bands."""
    snapshots = lakehouse.snapshot_ids(INPUTS)
    bands_snapshot = snapshots[DEDUP_MINHASH_BANDS.identifier]
    tasks = tuple(BandTask(b, lakehouse, bands_snapshot) for b in range(band_count(lakehouse, bands_snapshot)))
    return NearDuplicatePlan(
        lakehouse,
        params,
        snapshots,
        document_index(lakehouse, bands_snapshot),
        tasks,
        lakehouse.output(DEDUP_NEAR_DUPLICATES, {}, run, 0),
    )


def run(p: NearDuplicatePlan) -> TaskResult:
    """Candidates band by band, verification, crawl-ordered clusters; the rows written as data files (never
    commits). Stats: the counts the asset reports."""
    candidates = merge_edges(band_candidates(p.index, task) for task in p.bands)
    edges = verify(p, candidates)
    clusters = cluster_crawl_ordered(p.index.crawl_starts, len(p.index), edges)
    rows = near_duplicate_rows(p.index, clusters)
    writer = FileWriter(p.out)
    writer.write(rows)
    return TaskResult(
        0,
        (writer.close(),),
        {
            **cluster_stats(p.index, clusters),
            "rows": rows.num_rows,
            "bands": len(p.bands),
            "candidate_pairs": int(len(candidates)),
            "verified_pairs": int(len(edges)),
        },
    )


def commit(lakehouse: Lakehouse, result: TaskResult, provenance: Provenance) -> CommitResult:
    """Replace dedup.near_duplicates with the run's files (one transaction)."""
    done = lakehouse.commit([result], {DEDUP_NEAR_DUPLICATES: {}}, {DEDUP_NEAR_DUPLICATES: provenance})
    return done[DEDUP_NEAR_DUPLICATES]


# --- plan: the document index and the bands -------------------------------------------------------------------


def document_index(lakehouse: Lakehouse, bands_snapshot: int | None) -> DocumentIndex:
    """Every document with bands (each has band 0), sorted by (crawl, doc_id)."""
    docs = lakehouse.scan_at(DEDUP_MINHASH_BANDS, bands_snapshot, ("doc_id", "crawl", "segment"), EqualTo("band", 0))
    docs = docs.sort_by([("crawl", "ascending"), ("doc_id", "ascending")])
    crawls = docs["crawl"].combine_chunks()
    n = len(crawls)
    changes = (
        np.flatnonzero(pc.not_equal(crawls[1:], crawls[:-1]).to_numpy(zero_copy_only=False)) + 1
        if n > 1
        else np.empty(0, np.int64)
    )
    starts = (0, *changes.tolist()) if n else ()
    return DocumentIndex(docs["doc_id"].combine_chunks(), crawls, docs["segment"].combine_chunks(), starts)


def band_count(lakehouse: Lakehouse, bands_snapshot: int | None) -> int:
    """1 + the largest band number in dedup.minhash_bands, from the data files' column bounds (a scan of the
    `band` column when a file has none); 0 when the table is empty or was never written."""
    if bands_snapshot is None:
        return 0
    field_id = DEDUP_MINHASH_BANDS.schema.find_field("band").field_id
    uppers = [
        (f.file.upper_bounds or {}).get(field_id)
        for s in lakehouse.slices(DEDUP_MINHASH_BANDS, bands_snapshot)
        for f in s.files
    ]
    if any(u is None for u in uppers):
        return scanned_band_count(lakehouse, bands_snapshot)
    return max((struct.unpack("<i", u)[0] + 1 for u in uppers), default=0)


def scanned_band_count(lakehouse: Lakehouse, bands_snapshot: int | None) -> int:
    """`band_count` by reading the `band` column (streamed: bounded memory)."""
    top = -1
    for batch in lakehouse.batches_at(DEDUP_MINHASH_BANDS, bands_snapshot, ("band",)):
        m = pc.max(batch.column(0)).as_py()
        top = top if m is None else max(top, m)
    return top + 1


# --- run: candidates, verification, rows ----------------------------------------------------------------------


def band_candidates(index: DocumentIndex, task: BandTask) -> np.ndarray:
    """Pairs (i, j), i < j, of documents sharing the band's hash (document indices)."""
    band = task.lakehouse.scan_at(
        DEDUP_MINHASH_BANDS, task.snapshot_id, ("doc_id", "band_hash"), EqualTo("band", task.band)
    )
    return band_candidate_pairs(index.positions(band["doc_id"]), band["band_hash"].to_numpy())


def verify(p: NearDuplicatePlan, candidates: np.ndarray) -> np.ndarray:
    """The candidate pairs whose similarity reaches the threshold (all of them for verify="none")."""
    if p.params.verify == "none" or not len(candidates):
        return candidates
    return verify_edges(candidates, similarity(p, np.unique(candidates)), p.params.threshold)


def similarity(p: NearDuplicatePlan, involved: np.ndarray) -> Callable[[int, int], float]:
    """The pair similarity of `p.params.verify`, loading only the documents of candidate pairs (`involved`)."""
    ids = p.index.doc_ids.take(pa.array(involved, pa.int64())).to_pylist()

    def by_index(t, columns: tuple[str, str]) -> dict[int, object]:
        rows = p.lakehouse.scan_at(t, p.snapshot_ids[t.identifier], columns, In("doc_id", ids))
        return dict(zip(p.index.positions(rows["doc_id"]).tolist(), rows.column(1).to_pylist()))

    if p.params.verify == "estimated":
        stored = by_index(DEDUP_MINHASH_SIGNATURES, ("doc_id", "signature"))
        sig = {i: signature_from_bytes(b) for i, b in stored.items()}
        return lambda i, j: estimated_jaccard(sig[i], sig[j])
    n = p.params.n_grams
    sets = {i: frozenset(shingles(t or "", n)) for i, t in by_index(CURATED_DOCUMENTS, ("doc_id", "text")).items()}
    return lambda i, j: exact_jaccard(sets[i], sets[j])


def near_duplicate_rows(index: DocumentIndex, clusters: Clusters) -> pa.Table:
    """One row per document in a cluster of more than one: the canonical document (decision null) and its
    near duplicates (decision "near_duplicate", duplicate_of the canonical doc_id)."""
    members = np.flatnonzero(clusters.size > 1)
    dup = clusters.is_duplicate()[members]
    take = pa.array(members, pa.int64())
    canonical = index.doc_ids.take(pa.array(clusters.cluster_of[members], pa.int64()))
    return pa.table(
        {
            "doc_id": index.doc_ids.take(take),
            "crawl": index.crawls.take(take),
            "segment": index.segments.take(take),
            "decision": pa.array([DECISION_NEAR_DUPLICATE if d else None for d in dup], pa.string()),
            "cluster_id": canonical,
            "cluster_size": pa.array(clusters.size[members], pa.int32()),
            "duplicate_of": pc.if_else(pa.array(dup), canonical, pa.scalar(None, pa.string())),
        }
    )


def cluster_stats(index: DocumentIndex, clusters: Clusters) -> dict:
    """Documents, clusters, near duplicates, and near duplicates per crawl ({crawl: count})."""
    dup = clusters.is_duplicate()
    members = np.flatnonzero(clusters.size > 1)
    by_crawl = index.crawls.take(pa.array(np.flatnonzero(dup), pa.int64())).value_counts().to_pylist()
    return {
        "documents": len(index),
        "clusters": int(len(np.unique(clusters.cluster_of[members]))),
        "near_duplicates": int(dup.sum()),
        "near_duplicates_by_crawl": {d["values"]: d["counts"] for d in sorted(by_crawl, key=lambda d: d["values"])},
    }
