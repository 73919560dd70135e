"""Split clusters with semantic links (assets/dedup/semantic_clusters.py): the links, the crawl-ordered rule over
all clusters, and the threshold measured on labelled pairs (paraphrases vs unrelated documents)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.dedup.clustering import cluster_crawl_ordered
from assets.dedup.semantic_clusters import linkable_edges, pair_rule_quality, semantic_edges, split_clusters
from assets.dedup.splits import SEMANTIC_THRESHOLD, SplitParams, split_of
from assets.embeddings import embed
from assets.quarantine.semantic import reference_runs, web_texts

PARAPHRASES = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "paraphrases" / "paraphrases.jsonl"
WIDE = SplitParams(validation=0.3, test=0.3, seed=7)


# --- the links ------------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 40), st.integers(1, 7), st.floats(-0.5, 0.95), st.integers(0, 2**31))
def test_semantic_edges_are_every_pair_at_or_above_the_threshold(n, block, threshold, seed):
    e = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True) + 1e-12
    sims = e.astype(np.float64) @ e.astype(np.float64).T
    expected = sorted((i, j) for i in range(n) for j in range(i + 1, n) if sims[i, j] >= threshold)
    assert [tuple(p) for p in semantic_edges(e, threshold, block).tolist()] == expected


def test_only_linkable_documents_get_links_and_keep_their_indices():
    vectors = {"a": [1.0, 0.0], "b": [0.0, 1.0]}
    texts = ["a", "b", "a", None, "a", "b"]

    def by_letter(batch: list[str]) -> np.ndarray:  # a stand-in embedding: a function of the text
        return np.array([vectors.get(t, [0.6, 0.8]) for t in batch], np.float32)

    linkable = np.array([True, True, False, True, True, True])
    assert linkable_edges(texts, linkable, 0.99, by_letter).tolist() == [[0, 4], [1, 5]]
    assert linkable_edges(texts, np.zeros(6, bool), 0.99, by_letter).shape == (0, 2)


def test_a_pair_decision_does_not_depend_on_the_other_documents():
    """The guarantee that a later crawl changes no earlier split needs each earlier pair decided the same way
    whatever is embedded and compared with it: embed() gives a text the same bits alone or in any batch, and a
    pair's cosine is computed from its two rows alone."""
    texts = web_texts()[:40]
    together = embed(texts)
    alone = np.concatenate([embed([t]) for t in texts[:8]])
    shuffled = embed(texts[20:] + texts[:20])
    assert np.array_equal(together[:8], alone)
    assert np.array_equal(together, np.concatenate([shuffled[20:], shuffled[:20]]))
    e = together
    all_pairs = semantic_edges(e, 0.3)
    for block in (1, 7, 40):
        assert np.array_equal(semantic_edges(e, 0.3, block), all_pairs)
    early = semantic_edges(e[:25], 0.3)
    assert np.array_equal(early, all_pairs[all_pairs[:, 1] < 25])


def test_semantic_edges_refuse_a_threshold_that_is_no_cosine():
    with pytest.raises(ValueError, match="cosine"):
        semantic_edges(np.zeros((2, 3), np.float32), 1.5)


# --- the crawl-ordered rule over all clusters -----------------------------------------------------------------


@st.composite
def crawls_with_links(draw):
    """Crawl sizes, near-duplicate pairs and semantic pairs over their documents."""
    sizes = draw(st.lists(st.integers(1, 10), min_size=1, max_size=5))
    n = sum(sizes)

    def pairs(most):
        raw = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=most))
        return np.array(sorted({(min(i, j), max(i, j)) for i, j in raw if i != j}), np.int64).reshape(-1, 2)

    return sizes, pairs(n), pairs(2 * n)


def _clusters(sizes: list[int], near: np.ndarray, links: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unit_of, split cluster_of) of the first len(sizes) crawls: near-duplicate clusters by the near-dedup
    rule, then the split clusters; only pairs among these documents exist yet."""
    n = sum(sizes)
    starts = list(np.cumsum([0, *sizes[:-1]]))
    unit_of = cluster_crawl_ordered(starts, n, near[near[:, 1] < n]).cluster_of
    return unit_of, split_clusters(starts, n, unit_of, links[links[:, 1] < n]).cluster_of


def _components(n: int, pairs: np.ndarray) -> np.ndarray:
    """Reference connected components (label = smallest member), by repeated relaxation."""
    label = np.arange(n)
    changed = True
    while changed and len(pairs):
        before = label.copy()
        m = np.minimum(label[pairs[:, 0]], label[pairs[:, 1]])
        np.minimum.at(label, pairs[:, 0], m)
        np.minimum.at(label, pairs[:, 1], m)
        changed = not np.array_equal(before, label)
    return label


@settings(max_examples=300, deadline=None)
@given(crawls_with_links())
def test_no_cluster_straddles_two_splits_and_a_new_crawl_changes_no_earlier_split(case):
    sizes, near, links = case
    n = sum(sizes)
    unit_of, cluster_of = _clusters(sizes, near, links)
    doc_ids = [f"doc-{i:03d}" for i in range(n)]
    splits = [split_of(doc_ids[c], WIDE) for c in cluster_of]
    # a cluster is named by one of its members, the first: every member has that cluster's split
    for c in np.unique(cluster_of):
        members = np.flatnonzero(cluster_of == c)
        assert members[0] == c and len({splits[i] for i in members}) == 1
    # a near-duplicate cluster is never cut
    assert np.array_equal(cluster_of, cluster_of[unit_of])
    # a semantic link is cut only where honouring it would merge two clusters of earlier crawls: its later
    # document then sits in a cluster at least as early as the earlier document's
    crawl = np.repeat(np.arange(len(sizes)), sizes)
    starts = np.cumsum([0, *sizes[:-1]])
    for i, j in links:
        if cluster_of[i] == cluster_of[j]:
            continue
        fixed_i, fixed_j = (bool(unit_of[x] < starts[crawl[x]]) for x in (i, j))
        if crawl[i] < crawl[j]:  # j (fixed to its canonical's cluster, or free) joined an earlier cluster
            assert fixed_j or cluster_of[j] < cluster_of[i]
        else:  # same crawl: two fixed documents, or the free one joined an earlier cluster
            free, anchor = (j, i) if fixed_i else (i, j)
            assert (fixed_i and fixed_j) or (fixed_i != fixed_j and cluster_of[free] < cluster_of[anchor])
    # adding a crawl changes no earlier document's cluster, hence no earlier split
    for k in range(1, len(sizes)):
        _, earlier = _clusters(sizes[:k], near, links)
        assert np.array_equal(cluster_of[: len(earlier)], earlier)


@settings(max_examples=200, deadline=None)
@given(crawls_with_links())
def test_within_one_crawl_split_clusters_are_the_components_of_duplicates_and_links(case):
    sizes, near, links = case
    n = sum(sizes)
    unit_of, cluster_of = _clusters([n], near, links)
    must = np.stack([unit_of, np.arange(n)], axis=1)
    assert np.array_equal(cluster_of, _components(n, np.concatenate([must, links])))


def test_a_later_paraphrase_joins_the_earliest_cluster_and_earlier_clusters_never_merge():
    # crawl 0: documents 0, 1 (unrelated); crawl 1: document 2 links to both, document 3 near-duplicates 1
    # and links to 0: 2 joins 0's cluster (the earliest), 3 stays with its near-duplicate canonical 1
    unit_of = np.array([0, 1, 2, 1])
    links = np.array([[0, 2], [1, 2], [0, 3]])
    assert split_clusters([0, 2], 4, unit_of, links).cluster_of.tolist() == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="comes after it"):
        split_clusters([0], 2, np.array([1, 1]), np.empty((0, 2), np.int64))


# --- the threshold, measured ----------------------------------------------------------------------------------


def _paraphrase_scores() -> np.ndarray:
    items = [json.loads(line) for line in PARAPHRASES.read_text().splitlines()]
    originals, paraphrases = embed([i["original"] for i in items]), embed([i["paraphrase"] for i in items])
    return (originals * paraphrases).sum(axis=1)


def _pair_scores(a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    if b is None:
        return (a @ a.T)[np.triu_indices(len(a), 1)]
    return (a @ b.T).ravel()


def test_the_threshold_finds_most_paraphrases_and_few_unrelated_pairs():
    """50 benchmark items vs their paraphrases; 23,871 pairs of clean web pages. Measured at 0.75: recall 0.82
    (41/50); 9 pairs above it (3.8e-4): 1 the same page twice, 2 on one topic (MacBook keyboard news, Python
    environments), 1 two pages of one site, 5 pages in Russian, Japanese or Portuguese (hence
    SEMANTIC_LANGUAGES)."""
    web = embed(web_texts())
    quality = pair_rule_quality(_paraphrase_scores(), _pair_scores(web), SEMANTIC_THRESHOLD)
    assert quality["positives"] == 50 and quality["negatives"] == 219 * 218 // 2
    assert quality["recall"] >= 0.8
    assert quality["false_positive_rate"] <= 1e-3
    # the measured choice: a step up (0.775) loses the recall bar
    assert pair_rule_quality(_paraphrase_scores(), np.empty(0), SEMANTIC_THRESHOLD + 0.025)["recall"] < 0.8


def test_the_threshold_on_wikipedia_runs_and_web_pages():
    """Adds the 1,353 Wikipedia paragraph runs (~5 s to embed): web x Wikipedia pairs are negatives
    too (320 k pairs in all; pairs of runs are left out: runs of one article are related, not unrelated).
    Measured at 0.75: no web x Wikipedia pair above it, so the 9 web pairs: 2.8e-5."""
    runs, web = embed(reference_runs()), embed(web_texts())
    negatives = np.concatenate([_pair_scores(web), _pair_scores(web, runs)])
    quality = pair_rule_quality(_paraphrase_scores(), negatives, SEMANTIC_THRESHOLD)
    assert quality["recall"] >= 0.8 and quality["false_positive_rate"] <= 5e-5
