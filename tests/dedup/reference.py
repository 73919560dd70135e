"""Reference forms for the tests (and bench/dedup_quality.py), not used by the pipeline: one document's
signature, one shingle's hash, the in-memory LSH candidate set, the LSH S-curve."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from assets.dedup.clustering import cluster_crawl_ordered
from assets.dedup.minhash import DEFAULT_PARAMS, MinHashParams, shingle_hashes, signatures


def signature(text: str, params: MinHashParams = DEFAULT_PARAMS) -> np.ndarray:
    """MinHash signature of one document: uint32 array of length bands*rows; all 0xFFFFFFFF if it has no words."""
    return signatures([text], params)[0]


def shingle_hash32(shingle: bytes) -> int:
    """The 32-bit value MinHash permutes for one shingle (what `shingle_hashes` gives for it)."""
    return int(shingle_hashes([shingle])[0])


def candidate_pairs(band_hash_lists: Sequence[Sequence[int]]) -> set[tuple[int, int]]:
    """In-memory reference LSH: pairs (i, j), i < j, of documents sharing a hash in the same band. Quadratic in
    bucket size: for tests and small sets (the pipeline uses assets.dedup.clustering.band_candidate_pairs)."""
    buckets: dict[tuple[int, int], list[int]] = defaultdict(list)
    for doc, hashes in enumerate(band_hash_lists):
        for band, h in enumerate(hashes):
            buckets[(band, h)].append(doc)
    pairs: set[tuple[int, int]] = set()
    for members in buckets.values():
        for k, i in enumerate(members):
            pairs.update((i, j) for j in members[k + 1 :])
    return pairs


def match_probability(s: float, bands: int = DEFAULT_PARAMS.bands, rows: int = DEFAULT_PARAMS.rows) -> float:
    """Probability that two documents of Jaccard similarity s share at least one band: 1-(1-s^r)^b."""
    return 1.0 - (1.0 - s**rows) ** bands


def lsh_threshold(bands: int = DEFAULT_PARAMS.bands, rows: int = DEFAULT_PARAMS.rows) -> float:
    """The similarity where the LSH S-curve is steepest, about (1/b)^(1/r) (0.72 for 14 x 8)."""
    return (1.0 / bands) ** (1.0 / rows)


def crawl_ordered_rows(docs: Sequence[dict], pairs: Sequence[tuple[int, int]]) -> list[dict]:
    """The rows of dedup.near_duplicates by the single-process rule (`cluster_crawl_ordered` over the verified
    pairs of `docs`, which are in (crawl, doc_id) order): a document has a row when its cluster had more than one
    member once its crawl was added, with that size (rows are written crawl by crawl and never change)."""
    crawls = [d["crawl"] for d in docs]
    starts = [i for i in range(len(docs)) if i == 0 or crawls[i] != crawls[i - 1]]
    clusters = cluster_crawl_ordered(starts, len(docs), np.array(sorted(pairs), np.int64).reshape(-1, 2))
    members: dict[int, list[str]] = defaultdict(list)
    for i, c in enumerate(clusters.cluster_of.tolist()):
        members[c].append(crawls[i])
    rows = []
    for i, d in enumerate(docs):
        c = int(clusters.cluster_of[i])
        size = sum(1 for k in members[c] if k <= d["crawl"])
        if size > 1:
            dup = c != i
            rows.append(
                {
                    "doc_id": d["doc_id"],
                    "crawl": d["crawl"],
                    "segment": d["segment"],
                    "decision": "near_duplicate" if dup else None,
                    "cluster_id": docs[c]["doc_id"],
                    "cluster_size": size,
                    "duplicate_of": docs[c]["doc_id"] if dup else None,
                    "cluster_crawl": docs[c]["crawl"],
                }
            )
    return rows
