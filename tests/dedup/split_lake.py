"""Split assignments on a test lakehouse without Dagster: what the `embed` job (every segment) and the
`split_clusters` job do, in process, with few centroids (a test corpus has tens of documents)."""

from __future__ import annotations

import uuid

from assets.dedup import embeddings_table, split_assignments
from assets.dedup.semantic_links import LinkParams
from assets.dedup.split_assignments import SplitClusterParams
from iceberg_catalog import Lakehouse, Provenance, config_hash
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    DEDUP_SEMANTIC_CENTROIDS,
    DEDUP_SEMANTIC_LINKS,
    DEDUP_SPLIT_ASSIGNMENTS,
)
from resources.executor import InProcessExecutor

SMALL = SplitClusterParams(links=LinkParams(centroids=2, sample_docs=1000))
PROV = Provenance("dedup/split_assignments", None, "test", "test", config_hash({}))


def embed_all(lakehouse: Lakehouse) -> None:
    """Embed every segment of curated.documents (replacing its partition of dedup.embeddings)."""
    snapshot = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    segments = lakehouse.scan_at(CURATED_DOCUMENTS, snapshot, ("crawl", "segment")).to_pylist()
    for crawl, segment in sorted({(r["crawl"], r["segment"]) for r in segments}):
        tasks = embeddings_table.plan(
            lakehouse, crawl, segment, snapshot, embeddings_table.EmbeddingParams(), uuid.uuid4().hex
        )
        embeddings_table.commit(lakehouse, crawl, segment, [embeddings_table.run_task(t) for t in tasks], PROV)


def assign_splits(lakehouse: Lakehouse, params: SplitClusterParams = SMALL) -> dict:
    """Embed every segment, then links and split assignments of every crawl not yet assigned."""
    embed_all(lakehouse)
    prov = {t: PROV for t in (DEDUP_SEMANTIC_CENTROIDS, DEDUP_SEMANTIC_LINKS, DEDUP_SPLIT_ASSIGNMENTS)}
    return split_assignments.build(lakehouse, params, InProcessExecutor(), uuid.uuid4().hex, prov)
