"""Near-duplicate assets: MinHash LSH bands per partition, clusters across every partition.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import dagster as dg
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pydantic
from pyiceberg.expressions import And, EqualTo, In

from assets.governance.propagate import erasure
from assets.curated.defs import DOCUMENTS
from assets.dedup.clustering import (
    DECISION_NEAR_DUPLICATE,
    band_candidate_pairs,
    cluster_crawl_ordered,
    merge_edges,
    verify_edges,
)
from assets.dedup.minhash import (
    MinHashParams,
    band_hashes,
    estimated_jaccard,
    exact_jaccard,
    is_empty_signature,
    signature_from_bytes,
    signature_to_bytes,
    shingles,
    signatures,
)
from assets.lakehouse import md_table, provenance
from assets.partitions import crawl_segments
from resources import IcebergCatalogResource, parse_partition_key

MINHASH_BANDS = dg.AssetKey(["dedup", "minhash_bands"])
MINHASH_SIGNATURES = dg.AssetKey(["dedup", "minhash_signatures"])
NEAR_DUPLICATES = dg.AssetKey(["dedup", "near_duplicates"])


class MinHashConfig(dg.Config):
    """FineWeb's defaults: word 5-gram shingles, 14 bands x 8 rows, seed 1."""

    n_grams: int = 5
    bands: int = 14
    rows: int = 8
    seed: int = 1
    batch_docs: int = 2000
    workers: int = 1  # processes computing signatures; the output does not depend on it

    def params(self) -> MinHashParams:
        return MinHashParams(n_grams=self.n_grams, bands=self.bands, rows=self.rows, seed=self.seed)


@dg.multi_asset(
    name="dedup_minhash",
    specs=[
        dg.AssetSpec(MINHASH_BANDS, deps=[DOCUMENTS], code_version="minhash-2", kinds={"iceberg"}, group_name="dedup",
                     description="LSH band hashes of every kept document (curated.minhash_bands).",
                     metadata=erasure(("curated.minhash_bands", ["doc_id"]))),
        dg.AssetSpec(MINHASH_SIGNATURES, deps=[DOCUMENTS], code_version="minhash-2", kinds={"iceberg"},
                     group_name="dedup", description="MinHash signatures, read to verify candidate pairs "
                                                     "(curated.minhash_signatures).",
                     metadata=erasure(("curated.minhash_signatures", ["doc_id"]))),
    ],
    partitions_def=crawl_segments,
    pool="iceberg_dedup",
    can_subset=False,
)
def dedup_minhash(context: dg.AssetExecutionContext, config: MinHashConfig, catalog: IcebergCatalogResource):
    ref = parse_partition_key(context.partition_key)
    params = config.params()
    docs_table = catalog.table("curated.documents")
    snap = docs_table.current_snapshot()
    upstream = {"curated.documents": snap.snapshot_id if snap else None}
    reader = docs_table.scan(
        row_filter=And(EqualTo("crawl", ref.crawl), And(EqualTo("segment", ref.segment), EqualTo("kept", True))),
        selected_fields=("doc_id", "text"),
        snapshot_id=upstream["curated.documents"],
    ).to_arrow_batch_reader()
    partition = {"crawl": ref.crawl, "segment": ref.segment}
    bands_writer = catalog.partition_writer("curated.minhash_bands", partition)
    sigs_writer = catalog.partition_writer("curated.minhash_signatures", partition)
    t0 = time.perf_counter()
    n_docs = 0
    n_empty = 0
    pool = ProcessPoolExecutor(config.workers, mp_context=get_context("spawn")) if config.workers > 1 else None
    for batch in _rebatch(reader, config.batch_docs):
        sigs = _signatures(batch["text"].to_pylist(), params, pool, config.workers)
        # a text without shingles has no signature: it would collide with every other empty text
        nonempty = [k for k, sig in enumerate(sigs) if not is_empty_signature(sig)]
        n_empty += len(sigs) - len(nonempty)
        ids = [batch["doc_id"][k].as_py() for k in nonempty]
        sigs = sigs[nonempty]
        n = len(ids)
        n_docs += n
        hashes = np.array([band_hashes(s, params) for s in sigs], dtype=np.int64).reshape(n, params.bands)
        for b in range(params.bands):
            # one row group per band (each write is its own row group), sorted by hash: a band scan skips
            # every other band's row groups by their statistics
            bands_writer.write(pa.table({
                "doc_id": ids, "crawl": [ref.crawl] * n, "segment": [ref.segment] * n,
                "band": pa.array(np.full(n, b, np.int32)), "band_hash": hashes[:, b],
            }).sort_by([("band_hash", "ascending"), ("doc_id", "ascending")]))
        sigs_writer.write(pa.table({
            "doc_id": ids, "crawl": [ref.crawl] * n, "segment": [ref.segment] * n,
            "signature": [signature_to_bytes(s) for s in sigs],
        }))
        context.log.info("%s: %d documents hashed", ref.partition_key, n_docs)
    if pool is not None:
        pool.shutdown()
    hashed = {"n_grams": params.n_grams, "bands": params.bands, "rows": params.rows, "seed": params.seed}
    c1 = bands_writer.commit(provenance(context, MINHASH_BANDS, hashed, upstream))
    c2 = sigs_writer.commit(provenance(context, MINHASH_SIGNATURES, hashed, upstream))
    seconds = time.perf_counter() - t0
    yield dg.MaterializeResult(asset_key=MINHASH_BANDS, metadata={
        "dagster/row_count": c1.rows, "documents": n_docs, "documents_without_shingles": n_empty,
        "iceberg_snapshot_id": str(c1.snapshot_id),
        "signatures_per_second": round(n_docs / max(seconds, 1e-9), 1), "seconds": round(seconds, 2)})
    yield dg.MaterializeResult(asset_key=MINHASH_SIGNATURES, metadata={
        "dagster/row_count": c2.rows, "iceberg_snapshot_id": str(c2.snapshot_id)})


def _signatures(texts: list, params: MinHashParams, pool, workers: int) -> np.ndarray:
    """Signatures of `texts`, split across `pool` in contiguous chunks (same rows in the same order)."""
    if pool is None or len(texts) < 2 * workers:
        return signatures(texts, params)
    step = -(-len(texts) // workers)
    parts = pool.map(signatures, [texts[i : i + step] for i in range(0, len(texts), step)], [params] * workers)
    return np.concatenate(list(parts))


def _rebatch(reader: pa.RecordBatchReader, size: int):
    """Re-chunk a scan into tables of at most `size` rows."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in reader:
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


class NearDuplicateConfig(dg.Config):
    """Documents sharing a band are candidates; `verify` keeps a candidate pair when its similarity reaches
    `threshold`: "exact" = Jaccard of the two documents' shingle sets (reads their texts; precision 1 by
    construction), "estimated" = fraction of equal MinHash rows (cheaper; ~0.83 precision / 0.87 recall at
    0.8 with 14x8, see tests/dedup/test_minhash_quality.py), "none" = every candidate pair."""

    threshold: float = 0.8
    verify: str = pydantic.Field(default="exact", pattern="^(exact|estimated|none)$")
    n_grams: int = 5  # must match dedup/minhash_bands' n_grams (its shingles are what the bands hash)


def _similarity(verify: str, ids: pa.Array, doc_ids: pa.Array, catalog: IcebergCatalogResource, upstream: dict,
                n_grams: int):
    """The pair similarity function for `verify`, loading only the documents involved in candidate pairs."""
    id_list = ids.to_pylist()

    def by_index(table: pa.Table) -> dict[int, object]:
        idx = pc.index_in(table["doc_id"], value_set=doc_ids).to_numpy(zero_copy_only=False)
        return dict(zip(idx.tolist(), table.column(1).to_pylist()))

    if verify == "estimated":
        rows = catalog.table("curated.minhash_signatures").scan(
            row_filter=In("doc_id", id_list), selected_fields=("doc_id", "signature"),
            snapshot_id=upstream["curated.minhash_signatures"]).to_arrow()
        sig = {i: signature_from_bytes(b) for i, b in by_index(rows).items()}
        return lambda i, j: estimated_jaccard(sig[i], sig[j])
    rows = catalog.table("curated.documents").scan(
        row_filter=In("doc_id", id_list), selected_fields=("doc_id", "text"),
        snapshot_id=upstream["curated.documents"]).to_arrow()
    sets = {i: frozenset(shingles(t or "", n_grams)) for i, t in by_index(rows).items()}
    return lambda i, j: exact_jaccard(sets[i], sets[j])


@dg.asset(
    key=NEAR_DUPLICATES,
    metadata=erasure(("curated.near_duplicates", ["doc_id"])),
    deps=[MINHASH_BANDS, MINHASH_SIGNATURES],
    group_name="dedup",
    code_version="near-dedup-1",
    kinds={"iceberg"},
    pool="iceberg_dedup",
    automation_condition=dg.AutomationCondition.eager(),
    description="Near-duplicate clusters over ALL materialised partitions, band by band from the Iceberg index; "
                "earliest crawl then doc_id is canonical and stays so as crawls are added "
                "(curated.near_duplicates).",
)
def near_duplicates(context: dg.AssetExecutionContext, config: NearDuplicateConfig,
                    catalog: IcebergCatalogResource) -> dg.MaterializeResult:
    bands_table = catalog.table("curated.minhash_bands")
    upstream = catalog.snapshot_ids(("curated.minhash_bands", "curated.minhash_signatures", "curated.documents"))
    t0 = time.perf_counter()
    # the document index: every document has band 0; canonical order is (crawl, doc_id); a document's index
    # is its position in `doc_ids` (an Arrow array: ~40 bytes a document, no Python objects)
    empty = pa.table({"doc_id": pa.array([], pa.string()), "crawl": pa.array([], pa.string()),
                      "segment": pa.array([], pa.string())})
    docs = (bands_table.scan(row_filter=EqualTo("band", 0), selected_fields=("doc_id", "crawl", "segment"),
                             snapshot_id=upstream["curated.minhash_bands"]).to_arrow()
            if upstream["curated.minhash_bands"] else empty)
    docs = docs.sort_by([("crawl", "ascending"), ("doc_id", "ascending")])
    doc_ids = docs["doc_id"].combine_chunks()
    crawl_col = docs["crawl"].combine_chunks()
    n_docs = len(doc_ids)
    changes = np.flatnonzero(pc.not_equal(crawl_col[1:], crawl_col[:-1]).to_numpy(zero_copy_only=False)) + 1 \
        if n_docs > 1 else np.empty(0, np.int64)
    crawl_starts = [0, *changes.tolist()] if n_docs else []
    n_bands = 0
    per_band = []
    while upstream["curated.minhash_bands"]:
        band = bands_table.scan(row_filter=EqualTo("band", n_bands), selected_fields=("doc_id", "band_hash"),
                                snapshot_id=upstream["curated.minhash_bands"]).to_arrow()
        if band.num_rows == 0:
            break
        idx = pc.index_in(band["doc_id"], value_set=doc_ids).to_numpy(zero_copy_only=False).astype(np.int64)
        per_band.append(band_candidate_pairs(idx, band["band_hash"].to_numpy()))
        n_bands += 1
    candidates = merge_edges(per_band)
    del per_band
    edges = candidates
    if config.verify != "none" and len(candidates):
        involved = np.unique(candidates)
        similarity = _similarity(config.verify, doc_ids.take(pa.array(involved)), doc_ids, catalog, upstream,
                                 config.n_grams)
        edges = verify_edges(candidates, similarity, config.threshold)
    clusters = cluster_crawl_ordered(crawl_starts, n_docs, edges)
    members = np.flatnonzero(clusters.size > 1)
    dup = clusters.is_duplicate()
    take = pa.array(members, pa.int64())
    canonical = doc_ids.take(pa.array(clusters.cluster_of[members], pa.int64()))
    rows = pa.table({
        "doc_id": doc_ids.take(take),
        "crawl": crawl_col.take(take),
        "segment": docs["segment"].combine_chunks().take(take),
        "decision": pa.array([DECISION_NEAR_DUPLICATE if d else None for d in dup[members]], pa.string()),
        "cluster_id": canonical,
        "cluster_size": pa.array(clusters.size[members], pa.int32()),
        "duplicate_of": pc.if_else(pa.array(dup[members]), canonical, pa.scalar(None, pa.string())),
    })
    writer = catalog.partition_writer("curated.near_duplicates", {})
    writer.write(rows)
    commit = writer.commit(provenance(context, NEAR_DUPLICATES, config.model_dump(), upstream))
    seconds = time.perf_counter() - t0
    n_dup = int(dup.sum())
    dup_crawls = crawl_col.take(pa.array(np.flatnonzero(dup), pa.int64())).value_counts().to_pylist()
    by_crawl = {d["values"]: d["counts"] for d in dup_crawls}
    context.log.info("%d documents, %d candidate pairs, %d verified, %d near duplicates", n_docs,
                     len(candidates), len(edges), n_dup)
    return dg.MaterializeResult(metadata={
        "dagster/row_count": rows.num_rows,
        "documents": n_docs,
        "bands": n_bands,
        "candidate_pairs": int(len(candidates)),
        "verified_pairs": int(len(edges)),
        "clusters": int(len(set(clusters.cluster_of[members].tolist()))),
        "near_duplicates": n_dup,
        "seconds": round(seconds, 2),
        "iceberg_snapshot_id": str(commit.snapshot_id),
        "upstream_snapshot_ids": dg.MetadataValue.json(upstream),
        "near_duplicates_by_crawl": md_table(["crawl", "near duplicates"], sorted(by_crawl.items())),
    })


assets = [dedup_minhash, near_duplicates]
