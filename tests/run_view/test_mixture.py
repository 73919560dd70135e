"""Mixture selection (pure) and candidate determinism (real lakehouse)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from assets.run_view import store
from assets.run_view.mixture import (
    Component,
    MixtureError,
    feasible_budget,
    refuse_unvalidated_domains,
    select,
    within_tolerance,
)
from iceberg_catalog.run_view_contract import canonical_json, manifest_sha256
from iceberg_catalog.schemas import CURATED_EXACT_DUPLICATES, QUARANTINE_MATCHES
from tests.run_view import builders


def _docs(sizes, buckets=("head", "middle", "tail")):
    return [
        {"doc_id": f"d{i:04d}", "n_tokens": n, "ppl_bucket": buckets[i % len(buckets)], "language": "en"}
        for i, n in enumerate(sizes)
    ]


@given(
    st.lists(st.integers(5, 400), min_size=30, max_size=300),
    st.integers(0, 2**31),
    st.floats(0.1, 0.9),
    st.integers(1, 3),
)
def test_realised_token_shares_track_the_request(sizes, seed, w, reps):
    docs = _docs(sizes)
    comps = [
        Component("hm", w, {"ppl_bucket": ["head", "middle"]}, reps),
        Component("t", 1 - w, {"ppl_bucket": ["tail"]}),
    ]
    samples, realised = select(docs, comps, seed)
    # each document at most max_repetitions times, each repetition at most once
    per_doc = Counter((s.doc_id, s.repetition) for s in samples)
    assert max(per_doc.values()) == 1
    assert all(s.repetition < (reps if s.component == "hm" else 1) for s in samples)
    # the binding component is served whole; the other lands within one of its documents of the target
    total = sum(r.tokens for r in realised)
    biggest = max(sizes)
    for r in realised:
        assert abs(r.token_share * total - r.requested_share * total) <= biggest + 1
    assert sum(s.n_tokens for s in samples) == total
    assert abs(sum(r.token_share for r in realised) - 1) < 1e-9


def test_token_and_document_shares_differ_and_are_both_reported():
    # long "tail" documents: a 50/50 token split is far from a 50/50 document split
    docs = _docs([100] * 60 + [1000] * 30, buckets=("head", "middle"))
    for d in docs[60:]:
        d["ppl_bucket"] = "tail"
    comps = [
        Component("short", 0.5, {"ppl_bucket": ["head", "middle"]}),
        Component("long", 0.5, {"ppl_bucket": ["tail"]}),
    ]
    _, realised = select(docs, comps, seed=1)
    by = {r.component: r for r in realised}
    assert by["short"].token_share == pytest.approx(0.5, abs=0.01)
    assert by["short"].document_share > 0.8
    assert within_tolerance(realised, 0.01) == []


def test_canonical_order_is_a_function_of_seed_not_input_order():
    docs = _docs(range(10, 110))
    comps = [Component("all", 1.0, {}, 2)]
    a, _ = select(docs, comps, seed=7)
    shuffled = docs[:]
    random.Random(0).shuffle(shuffled)
    b, _ = select(shuffled, comps, seed=7)
    c, _ = select(docs, comps, seed=8)
    assert a == b
    assert a != c and sorted(map(repr, a)) == sorted(map(repr, c))


def test_first_matching_component_owns_a_document():
    docs = _docs([50] * 30)
    comps = [Component("head", 1.0, {"ppl_bucket": ["head"]}), Component("any", 1.0, {})]
    samples, _ = select(docs, comps, seed=0)
    owners = {}
    for s in samples:
        assert owners.setdefault(s.doc_id, s.component) == s.component


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"weight": 0}, "weight must be > 0"),
        ({"max_repetitions": 0}, "max_repetitions must be >= 1"),
        ({"filters": {"colour": ["red"]}}, "cannot filter on ['colour']"),
    ],
)
def test_bad_components_are_named(bad, message):
    with pytest.raises(MixtureError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Component(**{"name": "c", "weight": 1.0, **bad})


def test_budget_beyond_the_pools_and_empty_pools_are_refused():
    docs = _docs([100] * 30)
    comps = [Component("all", 1.0, {}, 2)]
    assert feasible_budget({"all": 3000}, comps) == 6000
    with pytest.raises(MixtureError, match="token_budget 6,001 exceeds .* at most 6,000"):
        select(docs, comps, 0, token_budget=6001)
    samples, _ = select(docs, comps, 0, token_budget=4500)
    assert sum(s.n_tokens for s in samples) == 4500
    with pytest.raises(MixtureError, match="component 'fr' matches no eligible document"):
        select(docs, [Component("fr", 1.0, {"language": ["fr"]})], 0)


def test_candidate_is_deterministic_and_any_change_is_a_new_id(lakehouse):
    builders.write_documents(lakehouse, n_docs=30)
    builders.screen(lakehouse)
    a = builders.candidate(lakehouse, name="det", seed=1)
    again = builders.candidate(lakehouse, name="det", seed=1)
    assert (again.run_view_id, again.manifest_sha256, again.created) == (a.run_view_id, a.manifest_sha256, False)
    stored = store.load_manifest(lakehouse, a.run_view_id)
    assert stored["manifest_sha256"] == manifest_sha256(stored["manifest"]) == a.manifest_sha256
    assert stored["manifest_json"] == canonical_json(a.manifest)
    ids = {a.run_view_id}
    for change in ({"seed": 2}, {"seq_len": 128}, {"cross_document_attention": "allowed"}, {"epochs": 3}):
        other = builders.candidate(lakehouse, name="det", **{"seed": 1, **change})
        assert other.created and other.run_view_id not in ids, change
        ids.add(other.run_view_id)
    # new input (a re-materialised partition) -> new pinned snapshot -> new id, same config
    builders.write_documents(lakehouse, n_docs=30)
    assert builders.candidate(lakehouse, name="det", seed=1).run_view_id not in ids
    # the seed changes the canonical order, not the selection (mixture "all")
    s1 = store.read_samples(lakehouse, a.run_view_id)
    s2 = store.read_samples(lakehouse, builders.candidate(lakehouse, name="det", seed=2).run_view_id)
    assert sorted(s1["doc_id"].to_pylist()) == sorted(s2["doc_id"].to_pylist())
    assert s1["doc_id"].to_pylist() != s2["doc_id"].to_pylist()


def test_a_component_selects_on_the_domain_label_and_its_confidence(lakehouse):
    docs = builders.write_documents(lakehouse, n_docs=12)
    builders.screen(lakehouse)
    sure = Component("encyclopedic", 1.0, {"domain_class": ["encyclopedic"], "min_domain_confidence": ["0.5"]})
    view = builders.candidate(lakehouse, name="sure", components=[sure])
    selected = store.read_samples(lakehouse, view.run_view_id)["doc_id"].to_pylist()
    assert sorted(selected) == sorted(d["doc_id"] for d in docs if d["domain_confidence"] >= 0.5)
    with pytest.raises(MixtureError, match="matches no eligible document"):
        builders.candidate(lakehouse, name="code", components=[Component("code", 1.0, {"domain_class": ["code"]})])


def test_excluded_documents_never_enter_a_view(lakehouse):
    docs = builders.write_documents(lakehouse, n_docs=30)
    builders.screen(lakehouse)
    dup, contaminated, near = docs[0], docs[1], docs[3]
    builders._write(
        lakehouse,
        CURATED_EXACT_DUPLICATES,
        {"crawl": dup["crawl"]},
        [
            {
                "doc_id": dup["doc_id"],
                "crawl": dup["crawl"],
                "segment": dup["segment"],
                "decision": "exact_duplicate",
                "duplicate_of": docs[2]["doc_id"],
                "duplicate_of_crawl": dup["crawl"],
                "text_sha256": "x",
            }
        ],
    )
    # near duplicates live in the dedup namespace; the cluster's canonical document (decision null) stays
    builders.write_near_duplicates(
        lakehouse,
        [
            {
                "doc_id": d["doc_id"],
                "crawl": d["crawl"],
                "segment": d["segment"],
                "decision": decision,
                "cluster_id": docs[4]["doc_id"],
                "cluster_size": 2,
                "duplicate_of": of,
            }
            for d, decision, of in ((near, "near_duplicate", docs[4]["doc_id"]), (docs[4], None, None))
        ],
    )
    builders._write(
        lakehouse,
        QUARANTINE_MATCHES,
        {"benchmark": builders.BENCHMARK, "crawl": contaminated["crawl"], "segment": contaminated["segment"]},
        [
            {
                "doc_id": contaminated["doc_id"],
                "crawl": contaminated["crawl"],
                "segment": contaminated["segment"],
                "benchmark": builders.BENCHMARK,
                "item_id": "0",
                "kind": "ngram",
                "overlap_fraction": 1.0,
                "char_start": 0,
                "char_end": 10,
                "decision": "eval_contaminated",
                "deletion_key": contaminated["deletion_key"],
            }
        ],
    )
    result = builders.candidate(lakehouse, name="excl")
    ids = set(store.read_samples(lakehouse, result.run_view_id)["doc_id"].to_pylist())
    assert not {dup["doc_id"], contaminated["doc_id"], near["doc_id"]} & ids and len(ids) == 27
    assert docs[4]["doc_id"] in ids
    assert result.manifest["exclusions"] == {
        "not_kept": 0,
        "exact_duplicate": 1,
        "near_duplicate": 1,
        "eval_contaminated": 1,
    }
    assert "dedup.near_duplicates" in result.manifest["inputs"]
    assert store.check_quarantine(lakehouse, result.run_view_id, result.manifest) == []


def test_a_component_may_not_select_on_a_domain_class_under_its_precision_floor():
    weak = {"encyclopedic": 0.167, "forum/qa": 0.625}
    ok = [Component("code", 1.0, {"domain_class": ["code"]}), Component("rest", 1.0)]
    refuse_unvalidated_domains(ok, weak, 0.7)
    bad = [
        Component("wiki", 1.0, {"domain_class": ["news", "encyclopedic"]}),
        Component("qa", 1.0, {"domain_class": ["forum/qa"]}),
    ]
    with pytest.raises(
        MixtureError, match=r"'wiki' filters on domain_class 'encyclopedic' \(precision 0.167 < 0.7"
    ) as e:
        refuse_unvalidated_domains(bad, weak, 0.7)
    assert "'qa' filters on domain_class 'forum/qa'" in str(e.value)
