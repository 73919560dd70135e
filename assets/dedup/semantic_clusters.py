"""Split clusters: near-duplicate clusters joined by semantic links (documents whose embeddings are neighbours),
crawl-ordered so that a document's cluster, hence its split, never changes when later crawls arrive. No Dagster.

They are data: `embeddings_table.py` stores each kept English document's vector once per segment,
`semantic_links.py` finds the pairs with cosine >= the threshold within k-means buckets crawl by crawl, and
`split_assignments.py` commits each crawl's (doc_id, split_cluster_id, split) in crawl order under a rule that
cannot snowball (mutual top-k neighbours, a cap on what semantic links may join). `split_cluster_ids` is what a run
view with a split reads: the stored rows of its pinned kept documents.

The threshold is measured on labelled pairs (tests/dedup/test_semantic_clusters.py; assets/dedup/README.md
"Splits" has the table): positives are the 50 benchmark items of data/benchmarks/paraphrases/ against their
hand-written paraphrases, negatives every pair of unrelated documents (the 219 clean web pages of
data/quarantine_background/, and their pairs with the Wikipedia paragraph runs of data/corpus/ in the slow test).
0.75 is the highest threshold (steps of 0.025) that keeps paraphrase recall >= 0.8. wordllama's embeddings are
English: 5 of the 9 unrelated web-page pairs above 0.75 are pages in Russian, Japanese or Portuguese that it maps
close together, so only documents whose language is in `SEMANTIC_LANGUAGES` are embedded and linked (the others
keep their near/exact-duplicate clusters).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import EqualTo

from assets.dedup.splits import SEMANTIC_THRESHOLD
from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_SPLIT_ASSIGNMENTS

__all__ = ["SEMANTIC_THRESHOLD", "split_cluster_ids", "pair_rule_quality"]


class SplitAssignmentsMissing(ValueError):
    """Kept documents of a view have no stored split assignment under the requested threshold."""


def split_cluster_ids(lakehouse: Lakehouse, pinned: Mapping[str, int | None], threshold: float) -> dict[str, str]:
    """Each kept document's split cluster id (curated.documents at its pinned snapshot), read from the stored
    dedup.split_assignments made with semantic `threshold` (a view without semantic links reads near-duplicate
    clusters alone: `assets/run_view/store.py`). Raises `SplitAssignmentsMissing` naming the crawls to assign."""
    docs = lakehouse.scan_at(
        CURATED_DOCUMENTS, pinned[CURATED_DOCUMENTS.identifier], ("doc_id", "crawl"), EqualTo("kept", True)
    )
    stored = lakehouse.scan(DEDUP_SPLIT_ASSIGNMENTS, ("doc_id", "crawl", "split_cluster_id", "rule"))
    rules = {r for r in set(stored.column("rule").to_pylist()) if json.loads(r)["threshold"] == threshold}
    cluster_of = {
        key: cluster
        for key, cluster, rule in zip(
            doc_keys(stored), stored.column("split_cluster_id").to_pylist(), stored.column("rule").to_pylist()
        )
        if rule in rules
    }
    wanted = doc_keys(docs)
    missing = sorted({k.split("\0", 1)[0] for k in wanted if k not in cluster_of})
    if missing:
        raise SplitAssignmentsMissing(
            f"{len(missing)} crawl(s) have kept documents without a split assignment at semantic threshold "
            f"{threshold}: {missing[:5]}; run the split_clusters job (assets/dedup) with threshold {threshold} first"
        )
    return {k.split("\0", 1)[1]: cluster_of[k] for k in wanted}


def doc_keys(rows: pa.Table) -> list[str]:
    """Each row's canonical key `crawl NUL doc_id` (doc_ids are unique per crawl)."""
    return [f"{c}\0{d}" for c, d in zip(rows.column("crawl").to_pylist(), rows.column("doc_id").to_pylist())]


def pair_rule_quality(positive: np.ndarray, negative: np.ndarray, threshold: float) -> dict:
    """Recall on the positive pairs' cosines, false positives among the negative pairs', and the precision of
    the rule on this labelled set (its class balance is the set's, not the web's)."""
    tp, fp = int((positive >= threshold).sum()), int((negative >= threshold).sum())
    return {
        "threshold": threshold,
        "positives": len(positive),
        "negatives": len(negative),
        "recall": tp / max(len(positive), 1),
        "false_positives": fp,
        "false_positive_rate": fp / max(len(negative), 1),
        "precision": tp / max(tp + fp, 1),
    }
