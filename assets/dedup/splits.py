"""Train / validation / test splits by near-duplicate cluster: every member of a cluster lands in the same split,
and a document's split never changes when later crawls arrive. No Dagster here.

A document's split is a pure function of its near-duplicate cluster id (``dedup.near_duplicates.cluster_id``,
the doc_id of the cluster's canonical document; a document in no cluster is its own cluster) and the split
parameters: ``u = sha256("tokenlake-split-v1", seed, cluster_id)`` read as a number in [0, 1); ``u < test``
is ``test``, ``u < test + validation`` is ``validation``, the rest ``train``. Clustering is crawl-ordered
(``clustering.py``): clusters of earlier crawls are never merged or re-elected, so an earlier document keeps
its cluster id, hence its split, whatever crawls are added later; a later document joins the cluster (and the
split) of the earliest earlier cluster it touches. Exact duplicates have identical shingles and so share their
canonical's near-duplicate cluster; ``cluster_ids`` also follows ``duplicate_of`` for an exact duplicate the
near-duplicate step did not see (a text too short for one shingle).

Semantic links refine the cluster id (``semantic_clusters.py``, stored by ``split_assignments.py``): documents
whose embeddings are neighbours (cosine >= ``SplitParams.semantic_threshold``, mutual top-k) land in one split
cluster while it stays within a cap, crawl-ordered (a later document joins its best earlier neighbour's cluster,
earlier clusters never merge), so every member of a near-duplicate cluster lands in one split and no split of an
earlier document changes. ``semantic_threshold=None`` is the near-duplicate-only assignment (what views recorded
before semantic links existed rebuild with).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

SPLITS = ("train", "validation", "test")
_SCALE = float(1 << 64)
# cosine of two documents' wordllama embeddings from which they are semantic neighbours; measured, see
# semantic_clusters.py and tests/dedup/test_semantic_clusters.py
SEMANTIC_THRESHOLD = 0.75
VALIDATION_FRACTION = 0.005  # of clusters, not documents
TEST_FRACTION = 0.005
SPLIT_SEED = 0


@dataclass(frozen=True)
class SplitParams:
    """How documents are split: fractions of clusters (not documents) and the seed of the assignment."""

    validation: float = VALIDATION_FRACTION
    test: float = TEST_FRACTION
    seed: int = SPLIT_SEED
    semantic_threshold: float | None = SEMANTIC_THRESHOLD

    def __post_init__(self) -> None:
        if not (0 <= self.validation and 0 <= self.test and self.validation + self.test < 1):
            raise ValueError(
                f"split fractions must be >= 0 with validation + test < 1, got {self.validation}, {self.test}"
            )
        if self.semantic_threshold is not None and not -1 <= self.semantic_threshold <= 1:
            raise ValueError(
                f"semantic_threshold is a cosine in [-1, 1] or None (near duplicates only), "
                f"got {self.semantic_threshold}"
            )

    def as_dict(self) -> dict:
        """As recorded in a run view's manifest (the near-duplicate-only form is the one recorded before
        semantic links existed, so those views keep their ids)."""
        base = {"validation": self.validation, "test": self.test, "seed": self.seed}
        if self.semantic_threshold is None:
            return {**base, "by": "near_duplicate_cluster"}
        return {**base, "by": "near_duplicate_and_semantic_cluster", "semantic_threshold": self.semantic_threshold}


def cluster_point(cluster_id: str, seed: int) -> float:
    """The cluster's seeded position in [0, 1) (the same on every machine and process)."""
    digest = hashlib.sha256(f"tokenlake-split-v1\0{seed}\0{cluster_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / _SCALE


def split_of(cluster_id: str, params: SplitParams = SplitParams()) -> str:
    """The split of every document of cluster `cluster_id`."""
    u = cluster_point(cluster_id, params.seed)
    if u < params.test:
        return "test"
    if u < params.test + params.validation:
        return "validation"
    return "train"


def cluster_ids(
    doc_ids: Iterable[str], near_cluster: Mapping[str, str], exact_duplicate_of: Mapping[str, str]
) -> dict[str, str]:
    """Each document's cluster id: its near-duplicate cluster, else (an exact duplicate the near-duplicate step
    did not cluster) its canonical's, else itself."""
    out = {}
    for d in doc_ids:
        if d in near_cluster:
            out[d] = near_cluster[d]
        elif d in exact_duplicate_of:
            canonical = exact_duplicate_of[d]
            out[d] = near_cluster.get(canonical, canonical)
        else:
            out[d] = d
    return out
