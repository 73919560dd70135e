"""Splits by near-duplicate cluster joined by semantic links (assets/dedup/splits.py, semantic_clusters.py) and
run views that select a split: no cluster straddles two splits, adding a crawl changes no earlier split, and
views without a split keep their ids."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions import EqualTo

from assets.dedup.clustering import cluster_crawl_ordered
from assets.dedup.semantic_clusters import split_cluster_ids
from assets.dedup.splits import SEMANTIC_THRESHOLD, SplitParams, cluster_ids, split_of
from assets.embeddings import embed
from assets.run_view import store
from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES, RUN_VIEW_SAMPLES
from tests.dedup.split_lake import assign_splits
from tests.run_view import builders

WIDE = SplitParams(validation=0.3, test=0.3, seed=7)  # every split well populated in small tests


def test_split_is_a_seeded_function_of_the_cluster_with_the_requested_fractions():
    ids = [f"cluster-{i}" for i in range(20_000)]
    p = SplitParams(validation=0.1, test=0.05, seed=3)
    splits = [split_of(c, p) for c in ids]
    assert splits == [split_of(c, p) for c in ids]
    shares = {s: splits.count(s) / len(ids) for s in ("train", "validation", "test")}
    assert abs(shares["validation"] - 0.1) < 0.01 and abs(shares["test"] - 0.05) < 0.01
    other_seed = [split_of(c, SplitParams(0.1, 0.05, seed=4)) for c in ids]
    assert sum(a != b for a, b in zip(splits, other_seed)) > 1000
    assert {split_of(c, SplitParams(0.0, 0.0)) for c in ids[:500]} == {"train"}
    with pytest.raises(ValueError):
        SplitParams(validation=0.6, test=0.5)


def test_exact_duplicates_follow_their_canonical():
    near = {"a": "a", "b": "a"}
    assert cluster_ids(["a", "b", "c", "d", "e"], near, {"c": "a", "d": "e"}) == {
        "a": "a",
        "b": "a",
        "c": "a",
        "d": "e",
        "e": "e",
    }


def _splits(crawl_sizes: list[int], edges: np.ndarray) -> list[str]:
    starts = list(np.cumsum([0, *crawl_sizes[:-1]]))
    n = sum(crawl_sizes)
    keep = edges[(edges[:, 1] < n)] if len(edges) else edges
    clusters = cluster_crawl_ordered(starts, n, keep)
    doc_ids = [f"doc-{i:04d}" for i in range(n)]
    near = {doc_ids[i]: doc_ids[int(c)] for i, c in enumerate(clusters.cluster_of)}
    by_doc = cluster_ids(doc_ids, near, {})
    return [split_of(by_doc[d], WIDE) for d in doc_ids], clusters.cluster_of


@st.composite
def crawls_and_edges(draw):
    sizes = draw(st.lists(st.integers(1, 12), min_size=2, max_size=5))
    n = sum(sizes)
    pairs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = sorted({(min(i, j), max(i, j)) for i, j in pairs if i != j})
    return sizes, np.array(edges, np.int64).reshape(-1, 2)


@settings(max_examples=200, deadline=None)
@given(crawls_and_edges())
def test_no_cluster_straddles_two_splits_and_a_new_crawl_changes_no_earlier_split(case):
    sizes, edges = case
    splits, cluster_of = _splits(sizes, edges)
    for c in np.unique(cluster_of):
        assert len({splits[i] for i in np.flatnonzero(cluster_of == c)}) == 1
    for k in range(1, len(sizes)):
        earlier, _ = _splits(sizes[:k], edges)
        assert splits[: len(earlier)] == earlier


def _write_near_duplicates(lakehouse, docs: list[dict], groups: list[list[int]]) -> None:
    rows = []
    for g in groups:
        canonical = docs[g[0]]["doc_id"]
        for pos, i in enumerate(g):
            rows.append(
                {
                    "doc_id": docs[i]["doc_id"],
                    "crawl": docs[i]["crawl"],
                    "segment": docs[i]["segment"],
                    "decision": None if pos == 0 else "near_duplicate",
                    "cluster_id": canonical,
                    "cluster_size": len(g),
                    "duplicate_of": None if pos == 0 else canonical,
                }
            )
    builders.write_near_duplicates(lakehouse, rows)


def test_run_views_select_disjoint_splits_and_views_without_a_split_keep_their_id(lakehouse):
    docs = builders.write_documents(lakehouse, n_docs=40)
    builders.screen(lakehouse)
    whole = builders.candidate(lakehouse, name="whole")
    assert "split" not in whole.manifest and list(whole.manifest["exclusions"]) == list(store.EXCLUSION_REASONS)
    assert "split" not in builders.spec(name="whole").config()
    _write_near_duplicates(lakehouse, docs, [[0, 1, 2], [3, 4]])
    assign_splits(lakehouse)
    whole = builders.candidate(lakehouse, name="whole")
    pinned = store.load_manifest(lakehouse, whole.run_view_id)["manifest"]["inputs"]
    clusters = split_cluster_ids(lakehouse, pinned, SEMANTIC_THRESHOLD)
    kw = {"validation_fraction": WIDE.validation, "test_fraction": WIDE.test, "split_seed": WIDE.seed}
    views = {s: builders.candidate(lakehouse, name=f"v-{s}", split=s, **kw) for s in ("train", "validation", "test")}
    selected = {s: {r["doc_id"] for r in _samples(lakehouse, v)} for s, v in views.items()}
    assert all(selected.values())
    assert not (selected["train"] & selected["validation"] or selected["train"] & selected["test"])
    assert not selected["validation"] & selected["test"]
    in_whole = {r["doc_id"] for r in _samples(lakehouse, whole)}
    assert selected["train"] | selected["validation"] | selected["test"] == in_whole
    for s, v in views.items():
        assert v.manifest["split"] == {"split": s, **WIDE.as_dict()}
        assert v.manifest["exclusions"]["other_split"] == len(in_whole) - len(selected[s])
        assert store.spec_from_manifest(v.manifest).split_params() == WIDE
        assert {split_of(clusters[d], WIDE) for d in selected[s]} == {s}
    # the near duplicates' canonical documents carry their cluster's split; the duplicates are never selected
    assert docs[1]["doc_id"] not in in_whole and docs[0]["doc_id"] in in_whole
    # near duplicates share their canonical's split cluster
    assert clusters[docs[1]["doc_id"]] == clusters[docs[2]["doc_id"]] == clusters[docs[0]["doc_id"]]
    # without semantic links (as views recorded before them), the cluster is the near-duplicate cluster
    near_only = builders.candidate(lakehouse, name="v-near", split="train", semantic_threshold=None, **kw)
    assert near_only.manifest["split"]["by"] == "near_duplicate_cluster"
    assert "semantic_threshold" not in near_only.manifest["split"]
    assert store.spec_from_manifest(near_only.manifest).semantic_threshold is None
    near_train = {r["doc_id"] for r in _samples(lakehouse, near_only)}
    assert near_train == {d for d in in_whole if split_of(d, WIDE) == "train"}


PARAPHRASES = Path(__file__).resolve().parents[2] / "data" / "benchmarks" / "paraphrases" / "paraphrases.jsonl"


def _linked_paraphrases(n: int) -> list[dict]:
    """The first `n` benchmark items whose hand-written paraphrase is a semantic neighbour of the original."""
    items = [json.loads(line) for line in PARAPHRASES.read_text().splitlines()]
    cosine = (embed([i["original"] for i in items]) * embed([i["paraphrase"] for i in items])).sum(axis=1)
    return [i for i, c in zip(items, cosine) if c >= SEMANTIC_THRESHOLD][:n]


def _write_kept(lakehouse, crawl: str, segment: str, docs: dict[str, str], language: str = "en") -> None:
    rows = [
        {
            "doc_id": d,
            "record_id": f"<urn:uuid:{d}>",
            "deletion_key": d,
            "crawl": crawl,
            "segment": segment,
            "url": f"https://example.org/{d}",
            "text": text,
            "kept": True,
            "language": language,
        }
        for d, text in docs.items()
    ]
    builders._write(lakehouse, CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment}, rows)


def test_semantic_neighbours_share_a_split_and_a_later_crawl_changes_no_earlier_split(lakehouse):
    """Crawl 2020: Wikipedia paragraphs and benchmark items; crawl 2021: more paragraphs and the items'
    paraphrases (no near-duplicate of anything). Each paraphrase joins its original's cluster; no document of
    2020 changes cluster (hence split) when 2021 arrives."""
    items = _linked_paraphrases(6)
    assert len(items) == 6
    builders.write_documents(lakehouse, n_docs=24, segments=("CC-2020/seg-a",))
    _write_kept(lakehouse, "CC-2020", "seg-x", {f"orig-{k}": i["original"] for k, i in enumerate(items)})
    _write_kept(lakehouse, "CC-2020", "seg-y", {"orig-de": items[0]["original"]}, language="de")
    tables = (CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES)
    assign_splits(lakehouse)
    before = split_cluster_ids(lakehouse, lakehouse.snapshot_ids(tables), SEMANTIC_THRESHOLD)
    builders.write_documents(lakehouse, n_docs=24, first=24, segments=("CC-2021/seg-a",))
    _write_kept(lakehouse, "CC-2021", "seg-x", {f"para-{k}": i["paraphrase"] for k, i in enumerate(items)})
    _write_kept(lakehouse, "CC-2021", "seg-y", {"para-de": items[0]["paraphrase"]}, language="de")
    assign_splits(lakehouse)
    after = split_cluster_ids(lakehouse, lakehouse.snapshot_ids(tables), SEMANTIC_THRESHOLD)
    assert len(before) == 31 and len(after) == 62
    # documents outside SEMANTIC_LANGUAGES (the embeddings are English) get no semantic links
    assert after["para-de"] == "para-de" and after["orig-de"] == "orig-de"
    assert {d: after[d] for d in before} == before
    assert all(after[f"para-{k}"] == after[f"orig-{k}"] for k in range(len(items)))
    for params in (WIDE, SplitParams()):
        for d in before:
            assert split_of(after[d], params) == split_of(before[d], params)


def test_a_cluster_keeps_its_name_and_split_when_its_canonical_is_erased(lakehouse):
    texts = builders.paragraphs()
    docs = [{"doc_id": d, "crawl": "CC-2020", "segment": "seg-x"} for d in ("a-1", "a-2", "b")]
    _write_kept(lakehouse, "CC-2020", "seg-x", {"a-1": texts[0], "a-2": texts[0] + " More.", "b": texts[1]})
    _write_near_duplicates(lakehouse, docs, [[0, 1]])
    tables = (CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES, DEDUP_NEAR_DUPLICATES)
    assign_splits(lakehouse)
    before = split_cluster_ids(lakehouse, lakehouse.snapshot_ids(tables), SEMANTIC_THRESHOLD)
    assert before["a-1"] == before["a-2"] == "a-1"
    _write_kept(lakehouse, "CC-2020", "seg-x", {"a-2": texts[0] + " More.", "b": texts[1]})  # a-1 erased
    after = split_cluster_ids(lakehouse, lakehouse.snapshot_ids(tables), SEMANTIC_THRESHOLD)
    assert after == {"a-2": "a-1", "b": before["b"]}


def _samples(lakehouse, result: store.CandidateResult) -> list[dict]:
    rows = lakehouse.scan(RUN_VIEW_SAMPLES, row_filter=EqualTo("run_view_id", result.run_view_id))
    return rows.to_pylist()


def test_a_run_view_spec_splits_with_the_split_defaults():
    """One default per knob: the run view's split knobs default to SplitParams' own values."""
    spec = store.RunViewSpec(components=(), split="validation")
    assert spec.split_params() == SplitParams()
