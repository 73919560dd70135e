"""Crawl-ordered clustering: deterministic, incremental, earlier canonicals never change."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from assets.dedup.clustering import band_candidate_pairs, cluster_crawl_ordered, merge_edges


def test_band_candidates_are_documents_sharing_a_hash():
    docs = np.array([5, 1, 3, 2, 4])
    hashes = np.array([7, 7, 9, 7, 9], dtype=np.int64)
    assert band_candidate_pairs(docs, hashes).tolist() == [[1, 2], [1, 5], [2, 5], [3, 4]]


def test_large_bucket_becomes_a_star():
    docs = np.arange(100)
    pairs = band_candidate_pairs(docs, np.zeros(100, np.int64), max_all_pairs=10)
    assert pairs.tolist() == [[0, j] for j in range(1, 100)]


def test_bridge_in_a_later_crawl_does_not_merge_earlier_clusters():
    # crawl A: docs 0, 1 (unrelated); crawl B: doc 2 similar to both
    c = cluster_crawl_ordered([0, 2], 3, np.array([[0, 2], [1, 2]]))
    assert c.cluster_of.tolist() == [0, 1, 0]
    assert c.is_duplicate().tolist() == [False, False, True]
    assert c.size.tolist() == [2, 1, 2]


def test_within_a_crawl_the_smallest_index_is_canonical():
    c = cluster_crawl_ordered([0], 4, np.array([[1, 3], [2, 3]]))
    assert c.cluster_of.tolist() == [0, 1, 1, 1]


def test_new_component_attaches_to_earliest_touched_cluster():
    # A: 0, 1 separate. B: 2-3 linked; 3~1 and 2~0 -> the component joins cluster 0 (the earliest)
    c = cluster_crawl_ordered([0, 2], 4, np.array([[2, 3], [1, 3], [0, 2]]))
    assert c.cluster_of.tolist() == [0, 1, 0, 0]


@st.composite
def corpora(draw):
    n_a = draw(st.integers(1, 12))
    n_b = draw(st.integers(0, 12))
    n = n_a + n_b
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40))
    edges = np.array(sorted({(min(i, j), max(i, j)) for i, j in pairs if i != j}), dtype=np.int64).reshape(-1, 2)
    return n_a, n_b, edges


@settings(max_examples=300, deadline=None)
@given(corpora(), st.randoms(use_true_random=False))
def test_incremental_equals_all_at_once_and_order_free(corpus, rnd):
    n_a, n_b, edges = corpus
    both = cluster_crawl_ordered([0, n_a] if n_b else [0], n_a + n_b, edges)
    only_a = cluster_crawl_ordered([0], n_a, edges[edges[:, 1] < n_a] if len(edges) else edges)
    # what crawl A decided stays decided once crawl B exists
    assert both.cluster_of[:n_a].tolist() == only_a.cluster_of.tolist()
    # edge order does not matter
    perm = list(range(len(edges)))
    rnd.shuffle(perm)
    shuffled = edges[perm] if len(edges) else edges
    again = cluster_crawl_ordered([0, n_a] if n_b else [0], n_a + n_b, shuffled)
    assert again.cluster_of.tolist() == both.cluster_of.tolist()
    # every canonical is its own canonical, and precedes its members
    co = both.cluster_of
    assert all(co[c] == c and c <= i for i, c in enumerate(co))
    # the union of per-band edge sets is order-free too
    assert merge_edges([shuffled[::2], shuffled[1::2]]).tolist() == merge_edges([edges]).tolist()
