"""Split clusters: near-duplicate clusters joined by semantic links (documents whose embeddings are neighbours),
crawl-ordered so that a document's cluster, hence its split, never changes when later crawls arrive. No Dagster.

A semantic link is a pair of documents whose `assets.embeddings.embed` vectors (wordllama, L2-normalised) have
cosine >= `SEMANTIC_THRESHOLD`. The threshold is measured on labelled pairs (tests/dedup/test_semantic_clusters.py;
assets/dedup/README.md "Splits" has the table): positives are the 50 benchmark items of
data/benchmarks/paraphrases/ against their hand-written paraphrases, negatives every pair of unrelated documents
(the 219 clean web pages of data/quarantine_background/, and their pairs with the Wikipedia paragraph runs of
data/corpus/ in the slow test). 0.75 is the highest threshold (steps of 0.025) that keeps paraphrase recall >= 0.8.
wordllama's embeddings are English: 5 of the 9 unrelated web-page pairs above 0.75 are pages in Russian, Japanese
or Portuguese that it maps close together, so only documents whose language is in `SEMANTIC_LANGUAGES` get
semantic links (the others keep their near/exact-duplicate clusters).

The crawl-ordered rule (`split_clusters`) is near-duplicate clustering's (clustering.py), with near-duplicate
(and exact-duplicate) clusters as must-links: documents are in canonical (crawl, doc_id) order; crawl by crawl,
a document whose near-duplicate canonical lies in an earlier crawl takes that canonical's split cluster (it is
fixed); the other documents of the crawl are joined by their must-links and by their semantic links to one
another into components, and each component joins the earliest earlier split cluster one of its members has a
semantic link to (directly, or through a fixed document of the same crawl), else it is a new cluster named by its
smallest index. Earlier clusters are never merged or re-elected, so no earlier document's cluster changes.
The price of that rule: a later document linked to two earlier clusters joins only the earliest one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import EqualTo

from assets.dedup.clustering import Clusters, UnionFind
from assets.dedup.splits import SEMANTIC_THRESHOLD, cluster_ids
from assets.embeddings import embed
from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES

__all__ = ["SEMANTIC_THRESHOLD", "semantic_edges", "split_clusters", "split_cluster_ids"]

SEMANTIC_LANGUAGES = frozenset({"en"})  # curated.documents.language values whose documents get semantic links
_BLOCK = 1024  # rows of the similarity matrix computed at a time
_MARGIN = 1e-3  # candidates from float32 products: far wider than their rounding error


def semantic_edges(embeddings: np.ndarray, threshold: float, block: int = _BLOCK) -> np.ndarray:
    """Pairs (i, j), i < j, of rows whose cosine (dot product of L2-normalised rows) reaches `threshold`, as a
    sorted (k, 2) int64 array. Candidates come from blocked float32 products (memory `block` x n floats, time
    quadratic in the documents) with a margin; each candidate's cosine is then recomputed from its two rows alone
    in float64, so a pair's decision never depends on which other documents are in the matrix (a later crawl
    cannot flip an earlier pair)."""
    if not -1 <= threshold <= 1:
        raise ValueError(f"semantic threshold is a cosine in [-1, 1], got {threshold}")
    e = np.asarray(embeddings, dtype=np.float32)
    out = []
    for lo in range(0, len(e), block):
        i, j = np.nonzero(e[lo : lo + block] @ e.T >= threshold - _MARGIN)
        i = i + lo
        keep = i < j
        out.append(np.stack([i[keep], j[keep]], axis=1).astype(np.int64))
    edges = np.concatenate(out) if out else np.empty((0, 2), np.int64)
    if not len(edges):
        return edges
    edges = edges[pair_cosines(e, edges) >= threshold]
    return edges[np.lexsort((edges[:, 1], edges[:, 0]))]


def pair_cosines(embeddings: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The cosine of each pair, from its two rows alone (float64, a fixed summation order)."""
    a = embeddings[pairs[:, 0]].astype(np.float64)
    b = embeddings[pairs[:, 1]].astype(np.float64)
    return (a * b).sum(axis=1)


def split_clusters(crawl_starts: Sequence[int], n_docs: int, unit_of: np.ndarray, links: np.ndarray) -> Clusters:
    """Crawl-ordered split clusters (module docstring). Documents 0..n_docs-1 in canonical order, crawl k owns
    [crawl_starts[k], crawl_starts[k+1]); `unit_of[i]`: index of document i's near/exact-duplicate canonical
    (i itself when it has none; never a later index); `links`: semantic pairs (i, j), i < j."""
    unit_of = np.asarray(unit_of, dtype=np.int64)
    later = np.flatnonzero(unit_of > np.arange(n_docs))
    if len(later):
        i = int(later[0])
        raise ValueError(
            f"document {i}'s duplicate canonical {int(unit_of[i])} comes after it: canonicals must be "
            "the earliest (crawl, doc_id) of their cluster; re-run near/exact dedup"
        )
    bounds = list(crawl_starts) + [n_docs]
    links = links[np.lexsort((links[:, 0], links[:, 1]))] if len(links) else np.empty((0, 2), np.int64)
    later_end = links[:, 1]
    final = np.arange(n_docs, dtype=np.int64)
    uf = UnionFind(n_docs)
    for k in range(len(crawl_starts)):
        start, end = bounds[k], bounds[k + 1]
        fixed = np.zeros(end - start, dtype=bool)
        for x in range(start, end):
            u = int(unit_of[x])
            if u < start:
                final[x], fixed[x - start] = final[u], True
            else:
                uf.union(x, u)
        lo, hi = np.searchsorted(later_end, start, "left"), np.searchsorted(later_end, end, "left")
        touches: list[tuple[int, int]] = []  # (free document of this crawl, earlier cluster it is linked to)
        for i, j in links[lo:hi]:
            i, j = int(i), int(j)
            j_fixed = fixed[j - start]
            if i < start:
                if not j_fixed:
                    touches.append((j, int(final[i])))
            else:
                i_fixed = fixed[i - start]
                if not (i_fixed or j_fixed):
                    uf.union(i, j)
                elif i_fixed != j_fixed:
                    free, anchor = (j, i) if i_fixed else (i, j)
                    touches.append((free, int(final[anchor])))
        attach: dict[int, int] = {}
        for free, target in touches:
            root = uf.find(free)
            if target < attach.get(root, n_docs):
                attach[root] = target
        for x in range(start, end):
            if not fixed[x - start]:
                root = uf.find(x)
                final[x] = attach.get(root, root)
    size = np.bincount(final, minlength=n_docs)[final]
    return Clusters(final, size)


def split_cluster_ids(
    lakehouse: Lakehouse,
    pinned: Mapping[str, int | None],
    threshold: float,
    embedder: Callable[[list[str]], np.ndarray] = embed,
) -> dict[str, str]:
    """Each kept document's split cluster id (its cluster's first document's duplicate cluster id) at the pinned
    snapshots of curated.documents, curated.exact_duplicates and dedup.near_duplicates (a view without semantic
    links reads near-duplicate clusters alone: `assets/run_view/store.py`)."""
    docs = lakehouse.scan_at(
        CURATED_DOCUMENTS,
        pinned[CURATED_DOCUMENTS.identifier],
        ("doc_id", "crawl", "language", "text"),
        EqualTo("kept", True),
    ).sort_by([("crawl", "ascending"), ("doc_id", "ascending")])
    doc_ids = docs.column("doc_id").to_pylist()
    near = lakehouse.scan_at(
        DEDUP_NEAR_DUPLICATES, pinned[DEDUP_NEAR_DUPLICATES.identifier], ("doc_id", "cluster_id")
    ).to_pylist()
    exact = lakehouse.scan_at(
        CURATED_EXACT_DUPLICATES, pinned[CURATED_EXACT_DUPLICATES.identifier], ("doc_id", "duplicate_of")
    ).to_pylist()
    units = cluster_ids(
        doc_ids, {r["doc_id"]: r["cluster_id"] for r in near}, {r["doc_id"]: r["duplicate_of"] for r in exact}
    )
    first: dict[str, int] = {}  # each duplicate cluster's first kept member (its canonical unless that was deleted)
    unit_of = np.array([first.setdefault(units[d], i) for i, d in enumerate(doc_ids)], dtype=np.int64)
    linkable = np.array([lang in SEMANTIC_LANGUAGES for lang in docs.column("language").to_pylist()], dtype=bool)
    links = linkable_edges(docs.column("text").to_pylist(), linkable, threshold, embedder)
    clusters = split_clusters(crawl_starts(docs.column("crawl")), len(doc_ids), unit_of, links)
    # a cluster is named by its first document's duplicate cluster id: its near/exact canonical, which stays the
    # name (and the split) when that canonical is erased
    return {d: units[doc_ids[int(c)]] for d, c in zip(doc_ids, clusters.cluster_of)}


def linkable_edges(
    texts: Sequence[str | None], linkable: np.ndarray, threshold: float, embedder: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    """Semantic pairs (i, j), i < j, among the documents marked `linkable` (indices into `texts`)."""
    which = np.flatnonzero(linkable)
    if len(which) < 2:
        return np.empty((0, 2), np.int64)
    pairs = semantic_edges(embedder([texts[i] or "" for i in which]), threshold)
    return which[pairs] if len(pairs) else pairs


def crawl_starts(crawls: pa.ChunkedArray | pa.Array) -> tuple[int, ...]:
    """Where each crawl begins in `crawls` (sorted ascending)."""
    values = crawls.to_pylist()
    return tuple(i for i, c in enumerate(values) if i == 0 or c != values[i - 1])


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
