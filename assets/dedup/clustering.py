"""Near-duplicate clustering: candidate pairs band by band, then crawl-ordered union-find in which earlier
crawls' canonical documents never change (assets/dedup/README.md). No Dagster here."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# A bucket with more members than this contributes a star (every member to the bucket's first) instead of all
# pairs: such buckets are templates or boilerplate where all pairs would be quadratic.
MAX_ALL_PAIRS_BUCKET = 32


def band_candidate_pairs(
    doc_index: np.ndarray, band_hash: np.ndarray, max_all_pairs: int = MAX_ALL_PAIRS_BUCKET
) -> np.ndarray:
    """Pairs (i, j), i < j, of documents sharing `band_hash` within ONE band, as an (k, 2) int64 array."""
    if len(doc_index) < 2:
        return np.empty((0, 2), np.int64)
    order = np.lexsort((doc_index, band_hash))
    h = band_hash[order]
    d = doc_index[order].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, h[1:] != h[:-1]])
    ends = np.r_[starts[1:], len(h)]
    sizes = ends - starts
    out: list[np.ndarray] = []
    for s, e in zip(starts[sizes > 1], ends[sizes > 1]):
        members = d[s:e]  # ascending: lexsort put doc_index second
        if e - s <= max_all_pairs:
            i, j = np.triu_indices(e - s, k=1)
            out.append(np.stack([members[i], members[j]], axis=1))
        else:
            out.append(np.stack([np.full(e - s - 1, members[0]), members[1:]], axis=1))
    return np.unique(np.concatenate(out), axis=0) if out else np.empty((0, 2), np.int64)


def merge_edges(edge_arrays: Iterable[np.ndarray]) -> np.ndarray:
    """Union of edge sets from several bands, unique and sorted."""
    arrays = [a for a in edge_arrays if len(a)]
    return np.unique(np.concatenate(arrays), axis=0) if arrays else np.empty((0, 2), np.int64)


def verify_edges(edges: np.ndarray, similarity: Callable[[int, int], float], threshold: float) -> np.ndarray:
    """Keep the candidate pairs whose similarity (exact or estimated Jaccard) reaches `threshold`."""
    keep = [k for k, (i, j) in enumerate(edges) if similarity(int(i), int(j)) >= threshold]
    return edges[keep] if len(keep) != len(edges) else edges


class UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, x: int) -> int:
        p = self.parent
        root = x
        while p[root] != root:
            root = p[root]
        while p[x] != root:  # path compression
            p[x], x = root, p[x]
        return int(root)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:  # the smaller index becomes the root: roots are the canonical documents
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb


@dataclass(frozen=True)
class Clusters:
    """`cluster_of[i]`: index of document i's canonical document; `size[i]`: its cluster's size."""

    cluster_of: np.ndarray
    size: np.ndarray

    def is_duplicate(self) -> np.ndarray:
        return self.cluster_of != np.arange(len(self.cluster_of))


def cluster_crawl_ordered(crawl_starts: Sequence[int], n_docs: int, edges: np.ndarray) -> Clusters:
    """Crawl-ordered clustering. Documents 0..n_docs-1 are in canonical order; crawl k owns indices
    [crawl_starts[k], crawl_starts[k+1]). `edges` are verified pairs (i, j) with i < j."""
    bounds = list(crawl_starts) + [n_docs]
    edges = edges[np.lexsort((edges[:, 0], edges[:, 1]))] if len(edges) else edges  # by the later endpoint
    cluster_of = np.arange(n_docs, dtype=np.int64)
    uf = UnionFind(n_docs)
    later = edges[:, 1] if len(edges) else np.empty(0, np.int64)
    for k in range(len(crawl_starts)):
        start, end = bounds[k], bounds[k + 1]
        lo, hi = np.searchsorted(later, start, "left"), np.searchsorted(later, end, "left")
        crawl_edges = edges[lo:hi]
        intra = crawl_edges[crawl_edges[:, 0] >= start]
        back = crawl_edges[crawl_edges[:, 0] < start]
        for i, j in intra:
            uf.union(int(i), int(j))
        # each component of this crawl joins the earliest earlier cluster it touches
        attach: dict[int, int] = {}
        for i, j in back:
            root = uf.find(int(j))
            target = int(cluster_of[i])
            if target < attach.get(root, n_docs):
                attach[root] = target
        for x in range(start, end):
            root = uf.find(x)
            cluster_of[x] = attach.get(root, root)
    size = np.bincount(cluster_of, minlength=n_docs)[cluster_of]
    return Clusters(cluster_of, size)
