"""Split clusters as data (assets/dedup/semantic_links.py, split_assignments.py, semantic_clusters.py): links
found within centroid buckets, the crawl-ordered rule that cannot snowball, the stored assignments a run view
reads, and the threshold measured on labelled pairs (paraphrases vs unrelated documents)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import EqualTo

from assets.dedup import semantic_links, split_assignments
from assets.dedup.clustering import cluster_crawl_ordered
from assets.dedup.semantic_clusters import SplitAssignmentsMissing, pair_rule_quality, split_cluster_ids
from assets.dedup.semantic_links import (
    Bucketed,
    LinkParams,
    fit_centroids,
    links_in_buckets,
    nearest_centroids,
    pair_cosines,
    sample_rank,
)
from assets.dedup.split_assignments import assign_crawl, mutual_top_k
from assets.dedup.splits import SEMANTIC_THRESHOLD
from assets.embeddings import embed, model_sha256
from assets.quarantine.semantic import reference_runs, web_texts
from iceberg_catalog.digest import rows_digest, table_digest
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_EMBEDDINGS, DEDUP_SEMANTIC_LINKS, DEDUP_SPLIT_ASSIGNMENTS
from tests.dedup.documents import doc_id, write_documents
from tests.dedup.split_lake import PROV, SMALL, assign_splits, embed_all

PARAPHRASES = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "paraphrases" / "paraphrases.jsonl"
BIG = 10**9  # a cap or k that never binds


# --- the links ------------------------------------------------------------------------------------------------


def unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    e = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return (e / (np.linalg.norm(e, axis=1, keepdims=True) + 1e-12)).astype(np.float16).astype(np.float32)


def bucket_links(
    e: np.ndarray,
    new_from: int,
    centroids: np.ndarray,
    probes: int,
    threshold: float,
    max_bucket: int = 2048,
    order: np.ndarray | None = None,
) -> set:
    """Every link of the documents from `new_from` on, found bucket by bucket: {(later, earlier)}; the rows
    held in `order` (default: document order)."""
    order = np.arange(len(e)) if order is None else order
    keys = np.array([f"c{int(i >= new_from)}\0d{i:04d}" for i in order], object)
    x = e[order]
    b = Bucketed(keys, order >= new_from, x.astype(np.float16), nearest_centroids(x, centroids, probes))
    params = LinkParams(threshold=threshold, centroids=len(centroids), probes=probes, max_bucket=max_bucket)
    found = [
        (int(order[x]), int(order[y]))
        for a, c, _ in links_in_buckets(b, 0, len(centroids), params)
        for x, y in zip(a, c)
    ]
    assert len(found) == len(set(found))  # each link once, even when its two rows share several buckets or leaves
    return set(found)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 60), st.integers(0, 60), st.integers(1, 6), st.floats(-0.3, 0.9), st.integers(0, 2**31))
def test_with_every_bucket_probed_the_links_are_every_pair_at_or_above_the_threshold(n, new_from, k, threshold, seed):
    e = unit_rows(n, 4, seed)
    c = fit_centroids(e, k, 3, seed)
    cos = e.astype(np.float64) @ e.astype(np.float64).T
    expected = {(j, i) for j in range(min(new_from, n), n) for i in range(j) if cos[i, j] >= threshold}
    assert bucket_links(e, new_from, c, len(c), threshold) == expected
    # fewer probes: only pairs that share a bucket, and every pair above the threshold that does
    near = nearest_centroids(e, c, 1)
    assert bucket_links(e, new_from, c, 1, threshold) == {(j, i) for j, i in expected if near[i, 0] == near[j, 0]}


@settings(max_examples=30, deadline=None)
@given(st.integers(40, 160), st.integers(0, 160), st.integers(1, 3), st.integers(4, 24), st.integers(0, 2**31))
def test_a_cut_bucket_finds_the_pairs_sharing_a_leaf_each_once_and_its_leaves_are_bounded(n, new_from, k, most, seed):
    e = unit_rows(n, 4, seed)
    c = fit_centroids(e, k, 3, seed)
    cos = e.astype(np.float64) @ e.astype(np.float64).T
    expected = {(j, i) for j in range(min(new_from, n), n) for i in range(j) if cos[i, j] >= 0.5}
    found = bucket_links(e, new_from, c, min(2, k), 0.5, max_bucket=most)
    assert found <= expected  # every link is a pair above the threshold, found once (bucket_links checks)
    # the cut is a function of the bucket's members: the same links whatever order the rows come in
    shuffled = np.random.default_rng(seed).permutation(n)
    assert bucket_links(e, new_from, c, min(2, k), 0.5, most, shuffled) == found
    # one bucket: its leaves as link search cuts it
    params = LinkParams(centroids=1, probes=1, max_bucket=most)
    ranks = sample_rank([f"c1\0d{i:04d}" for i in range(n)], 0)
    leaves = semantic_links.bucket_leaves(e.astype(np.float16), ranks, params)
    assert set(np.concatenate(leaves).tolist()) == set(range(n))  # every member is in a leaf
    if len(leaves) > 1:  # cut: no leaf holds the whole bucket
        assert max(len(x) for x in leaves) < n
    # every pair sharing a leaf of its smallest shared bucket is found (all rows new, one bucket)
    one = bucket_links(e, 0, c[:1], 1, 0.5, max_bucket=most)
    same_leaf = {(int(j), int(i)) for x in leaves for i in x for j in x if i < j and cos[i, j] >= 0.5}
    assert one == same_leaf


def test_a_rows_buckets_and_a_pairs_cosine_do_not_depend_on_the_other_rows():
    e, c = unit_rows(300, 16, 1), fit_centroids(unit_rows(300, 16, 2), 8, 5, 0)
    together = nearest_centroids(e, c, 2)
    assert np.array_equal(together[:7], np.concatenate([nearest_centroids(e[i : i + 1], c, 2) for i in range(7)]))
    assert np.array_equal(together, nearest_centroids(e[::-1], c, 2)[::-1])
    pairs = pair_cosines(e[:50], e[50:100])
    assert np.array_equal(pairs[:5], pair_cosines(e[:5], e[50:55]))


def test_the_fit_is_a_seeded_function_of_the_sample():
    e = unit_rows(200, 8, 3)
    assert np.array_equal(fit_centroids(e, 6, 5, 0), fit_centroids(e, 6, 5, 0))
    assert not np.array_equal(fit_centroids(e, 6, 5, 0), fit_centroids(e, 6, 5, 1))
    ranks = sample_rank(["a", "b", "c"], 0)
    assert ranks.tolist() == sample_rank(["c", "a", "b"], 0)[[1, 2, 0]].tolist()


# --- the rule -------------------------------------------------------------------------------------------------


def test_mutual_top_k_keeps_a_link_only_within_both_ends_k_best():
    # node 0 is a hub linked to 1, 2, 3; with k = 2 its third-best link (to 3) is cut, though it is 3's best
    a, b, cos = np.array([1, 2, 3, 2]), np.array([0, 0, 0, 1]), np.array([0.9, 0.8, 0.7, 0.95])
    assert mutual_top_k(a, b, cos, 2).tolist() == [True, True, False, True]
    assert mutual_top_k(a, b, cos, 1).tolist() == [False, False, False, True]
    assert mutual_top_k(a, b, cos, 3).all()


@st.composite
def crawls_with_links(draw):
    """Crawl sizes, near-duplicate pairs and semantic pairs (with cosines) over their documents."""
    sizes = draw(st.lists(st.integers(1, 10), min_size=1, max_size=5))
    n = sum(sizes)

    def pairs(most):
        raw = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=most))
        return np.array(sorted({(min(i, j), max(i, j)) for i, j in raw if i != j}), np.int64).reshape(-1, 2)

    links = pairs(2 * n)
    cos = np.array(draw(st.lists(st.floats(0.75, 1.0), min_size=len(links), max_size=len(links))), np.float64)
    return sizes, pairs(n), links, cos


def assign(sizes, near, links, cos, k=BIG, cap=BIG) -> tuple[np.ndarray, list[str]]:
    """Crawl by crawl as the step does: (unit of each document, split cluster of each document)."""
    n, starts = sum(sizes), list(np.cumsum([0, *sizes[:-1]]))
    unit = cluster_crawl_ordered(starts, n, near[near[:, 1] < n]).cluster_of
    names = [f"u{int(u):03d}" for u in unit]
    out: list[str] = []
    for s, size in zip(starts, sizes):
        docs = range(s, s + size)
        unit_cluster = {names[x]: out[x] for x in range(s)}
        earlier_size = {c: out.count(c) for c in set(out)}
        mine = (links[:, 1] >= s) & (links[:, 1] < s + size)
        later, other = links[mine, 1], links[mine, 0]
        earlier = sorted({int(o) for o in other if o < s})
        node = {o: size + j for j, o in enumerate(earlier)}
        b = np.array([node[int(o)] if o < s else int(o) - s for o in other], np.int64)
        out += assign_crawl(
            [names[x] for x in docs],
            unit_cluster,
            earlier_size,
            [out[o] for o in earlier],
            (later - s, b, cos[mine]),
            k,
            cap,
        )
    return unit, out


def components(n: int, pairs: np.ndarray) -> np.ndarray:
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
@given(crawls_with_links(), st.integers(1, 4), st.integers(1, 6))
def test_no_duplicate_cluster_is_cut_semantic_growth_is_capped_and_a_new_crawl_changes_nothing_earlier(case, k, cap):
    sizes, near, links, cos = case
    unit, clusters = assign(sizes, near, links, cos, k, cap)
    # a near-duplicate cluster is never cut
    for u in np.unique(unit):
        assert len({clusters[i] for i in np.flatnonzero(unit == u)}) == 1
    # a cluster of several duplicate clusters was made by semantic links: never larger than the cap, but for the
    # later near duplicates of its members (must-links are unlimited)
    crawl_start = np.repeat(np.cumsum([0, *sizes[:-1]]), sizes)
    for c in set(clusters):
        members = [i for i, x in enumerate(clusters) if x == c]
        if len({int(unit[i]) for i in members}) > 1:
            assert sum(int(unit[i] >= crawl_start[i]) for i in members) <= cap, (c, members)
    # adding a crawl changes no earlier document's cluster
    for m in range(1, len(sizes)):
        assert clusters[: sum(sizes[:m])] == assign(sizes[:m], near, links, cos, k, cap)[1]


@settings(max_examples=200, deadline=None)
@given(crawls_with_links())
def test_unbounded_within_one_crawl_split_clusters_are_the_components_of_duplicates_and_links(case):
    sizes, near, links, cos = case
    n = sum(sizes)
    unit, clusters = assign([n], near, links, cos)
    label = components(n, np.concatenate([np.stack([unit, np.arange(n)], axis=1), links]))
    assert [f"u{int(unit[x]):03d}" for x in label] == clusters


def test_a_later_document_joins_its_best_earlier_neighbour_and_earlier_clusters_never_merge():
    # crawl 0: documents 0, 1 (unrelated); crawl 1: document 2 links to both (to 1 better), document 3
    # near-duplicates 1 and links to 0: 2 joins 1's cluster, 3 stays with its near-duplicate canonical 1
    near, links = np.array([[1, 3]]), np.array([[0, 2], [1, 2], [0, 3]])
    _, clusters = assign([2, 2], near, links, np.array([0.8, 0.9, 0.95]))
    assert clusters == ["u000", "u001", "u001", "u001"]


def test_the_cap_stops_a_chain():
    # one crawl, a chain 0-1-2-...-9 of strong links: with a cap of 3, no cluster grows past 3 documents
    links = np.array([[i, i + 1] for i in range(9)])
    _, clusters = assign([10], np.empty((0, 2), np.int64), links, np.linspace(0.99, 0.8, 9), cap=3)
    assert max(clusters.count(c) for c in set(clusters)) == 3
    _, unbounded = assign([10], np.empty((0, 2), np.int64), links, np.linspace(0.99, 0.8, 9))
    assert len(set(unbounded)) == 1


# --- stored, crawl by crawl -----------------------------------------------------------------------------------


def linked_paraphrases(n: int) -> list[dict]:
    """The first `n` benchmark items whose hand-written paraphrase is a semantic neighbour of the original."""
    items = [json.loads(line) for line in PARAPHRASES.read_text().splitlines()]
    cosine = (embed([i["original"] for i in items]) * embed([i["paraphrase"] for i in items])).sum(axis=1)
    return [i for i, c in zip(items, cosine) if c >= SEMANTIC_THRESHOLD][:n]


def write_crawl(lakehouse, crawl: str, texts: list[str], salt: str) -> list[str]:
    docs = [(doc_id(t, salt), t, True) for t in texts]
    write_documents(lakehouse, crawl, "s", docs, files=2, language="en")
    return [d for d, _, _ in docs]


def assignment_digest(lakehouse, crawl: str) -> str:
    return rows_digest(lakehouse.scan(DEDUP_SPLIT_ASSIGNMENTS, row_filter=EqualTo("crawl", crawl)))


def test_stored_assignments_paraphrases_join_their_originals_and_earlier_rows_never_change(lakehouse):
    """Crawl A: 40 web pages and 8 benchmark items; crawl B: 20 more pages and the items' paraphrases. Each
    paraphrase joins its original's split cluster; crawl A's stored rows hash the same after B is added; a run
    view's reader gets the stored ids and refuses documents without rows."""
    items, web = linked_paraphrases(8), web_texts()
    originals = write_crawl(lakehouse, "CRAWL-A", web[:40] + [i["original"] for i in items], "a")
    assign_splits(lakehouse)
    pinned_a = lakehouse.snapshot_ids([CURATED_DOCUMENTS])
    before = assignment_digest(lakehouse, "CRAWL-A")
    ids_a = split_cluster_ids(lakehouse, pinned_a, SEMANTIC_THRESHOLD)
    paraphrases = write_crawl(lakehouse, "CRAWL-B", web[40:60] + [i["paraphrase"] for i in items], "b")
    pinned_b = lakehouse.snapshot_ids([CURATED_DOCUMENTS])
    with pytest.raises(SplitAssignmentsMissing, match="CRAWL-B"):
        split_cluster_ids(lakehouse, pinned_b, SEMANTIC_THRESHOLD)
    built = assign_splits(lakehouse)
    assert sorted(built["stats"]["crawls"]) == ["CRAWL-B"] and not built["stats"]["centroids_fitted"]
    assert assignment_digest(lakehouse, "CRAWL-A") == before
    ids = split_cluster_ids(lakehouse, pinned_b, SEMANTIC_THRESHOLD)
    assert {d: ids[d] for d in ids_a} == ids_a and len(ids) == 2 * len(items) + 60
    joined = sum(ids[p] == ids[o] for p, o in zip(paraphrases[-len(items) :], originals[-len(items) :]))
    assert joined >= 0.8 * len(items)
    with pytest.raises(SplitAssignmentsMissing, match="threshold 0.8"):
        split_cluster_ids(lakehouse, pinned_b, 0.8)
    links = lakehouse.scan(DEDUP_SEMANTIC_LINKS).to_pylist()
    assert links and all(r["cosine"] >= SEMANTIC_THRESHOLD and r["linked_crawl"] <= r["crawl"] for r in links)
    assert nothing_recomputed(lakehouse)


def nothing_recomputed(lakehouse) -> bool:
    """A run with every crawl assigned commits nothing."""
    built = assign_splits(lakehouse)
    return built["stats"]["crawls"] == {} and set(built["commits"]) == set()


def test_the_links_do_not_depend_on_the_task_count(lakehouse):
    write_crawl(lakehouse, "CRAWL-A", web_texts()[:60], "a")
    embed_all(lakehouse)
    model, at = model_sha256(), lakehouse.snapshot_id(DEDUP_EMBEDDINGS)
    version, centroids, _ = semantic_links.ensure_centroids(lakehouse, at, model, SMALL.links, PROV)
    digests, stats, assigned = [], [], []
    # 1 or 2 link tasks (2 centroids), and as many as the rows ask for (task_vectors 10); buckets cut (max 8)
    for tasks, task_vectors in ((1, 10**9), (2, 10**9), (1, 10)):
        params = dataclasses.replace(SMALL.links, tasks=tasks, task_vectors=task_vectors, max_bucket=8)
        run = uuid.uuid4().hex
        planned = semantic_links.plan(lakehouse, "CRAWL-A", at, model, (version, centroids), params, run)
        results, _ = semantic_links.link_crawl(planned, Reversed(), run, PROV)
        assert len(results) == (tasks if task_vectors > 100 else 2)
        digests.append(table_digest(lakehouse, DEDUP_SEMANTIC_LINKS))
        stats.append(semantic_links.totals(results))
        # nor do the assignments made from them (the link files come in another order)
        pinned = lakehouse.snapshot_ids(split_assignments.INPUTS)
        rows = split_assignments.crawl_rows(lakehouse, "CRAWL-A", pinned, SMALL, model, version)
        assigned.append(rows_digest(rows))
    assert digests[0] == digests[1] == digests[2] and digests[0]["rows"] > 0
    assert assigned[0] == assigned[1] == assigned[2]
    assert stats[0]["links"] == stats[1]["links"] == stats[2]["links"] == digests[0]["rows"]
    assert stats[0]["cut_buckets"] == 2 and stats[0]["largest_leaf"] < stats[0]["largest_bucket"]


class Reversed:
    """An executor running the tasks in reverse plan order (and returning their results so)."""

    def map(self, fn, tasks, progress=None):
        return [fn(t) for t in tasks[::-1]]


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


def test_a_crawl_without_kept_documents_is_not_pending_and_a_new_segment_reopens_its_crawl(lakehouse):
    write_crawl(lakehouse, "CRAWL-A", web_texts()[:30], "a")
    write_documents(lakehouse, "CRAWL-B", "s", [(doc_id("x", "b"), "dropped", False)], files=1, language="en")
    assert sorted(assign_splits(lakehouse)["stats"]["crawls"]) == ["CRAWL-A"]
    write_crawl(lakehouse, "CRAWL-C", web_texts()[30:40], "c")
    assert sorted(assign_splits(lakehouse)["stats"]["crawls"]) == ["CRAWL-C"]
    texts = web_texts()[40:45]
    write_documents(lakehouse, "CRAWL-A", "t", [(doc_id(t, "a2"), t, True) for t in texts], files=1, language="en")
    assert sorted(assign_splits(lakehouse)["stats"]["crawls"]) == ["CRAWL-A", "CRAWL-C"]
    assert nothing_recomputed(lakehouse)


@pytest.mark.slow
def test_paraphrase_recall_on_the_committed_set_under_the_stored_rule(lakehouse):
    """The 50 committed paraphrases against their originals, stored crawl by crawl with the rule (mutual top-5,
    cap 32) among 1,572 real documents (web pages and Wikipedia runs, half in each crawl). Measured: 0.82 (41/50),
    the same as the threshold alone: the rule cuts none of the paraphrase links that pass the threshold."""
    items = [json.loads(line) for line in PARAPHRASES.read_text().splitlines()]
    background = list(web_texts()) + list(reference_runs())
    originals = write_crawl(lakehouse, "CRAWL-A", background[::2] + [i["original"] for i in items], "a")
    paraphrases = write_crawl(lakehouse, "CRAWL-B", background[1::2] + [i["paraphrase"] for i in items], "b")
    assign_splits(lakehouse, dataclasses.replace(SMALL, links=LinkParams(centroids=16, sample_docs=2000)))
    ids = split_cluster_ids(lakehouse, lakehouse.snapshot_ids([CURATED_DOCUMENTS]), SEMANTIC_THRESHOLD)
    joined = sum(ids[p] == ids[o] for p, o in zip(paraphrases[-len(items) :], originals[-len(items) :]))
    assert joined / len(items) >= 0.8
