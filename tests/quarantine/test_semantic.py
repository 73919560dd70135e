"""Semantic quarantine: paraphrased benchmark items (written for this test, committed with their originals) are
found when injected into real documents, clean reference text is rarely flagged, and the exact and near
matches of a screening are the same with semantic matching on or off."""

from __future__ import annotations

import json
import math
import random
import uuid
from pathlib import Path

import numpy as np
import pytest

from assets.quarantine import decontaminate, semantic
from assets.quarantine.benchmarks import GSM8K, HUMANEVAL, load_items, read_benchmark
from assets.quarantine.decontaminate import MatchParams
from iceberg_catalog.schemas import QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES
from tests.quarantine.injection import JSONL_DOCS
from tests.tokenized.partitions import PROVENANCE, curated_rows, write_curated

REPO = Path(__file__).resolve().parents[2]
PARAPHRASES = REPO / "data" / "benchmarks" / "paraphrases" / "paraphrases.jsonl"
# The target: recall >= 0.8 at <= 1% false positives. At the committed per-benchmark candidate margins
# and lexical shares (chosen on the calibration half's clean documents, which include web text) held-out recall
# is 0.92 in the bench (23 of 25); 1 of 338 held-out Wikipedia runs, 0 of 61 news texts and 0 of 39 sample-crawl
# documents are flagged (README.md, "Semantic matches").
RECALL, FP_RATE = 0.8, 0.01


def paraphrases(half: str | None = None) -> list[dict]:
    with open(PARAPHRASES, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if half is None or r["half"] == half]


def inject(rows: list[dict], hosts: list[str], seed: int = 19) -> list[str]:
    """Each paraphrase inserted at a whitespace position of a seeded random host document."""
    rng = random.Random(seed)
    out = []
    for r in rows:
        host = hosts[rng.randrange(len(hosts))]
        at = rng.choice([i for i, ch in enumerate(host) if ch.isspace()] or [len(host)])
        out.append(host[:at] + " " + r["paraphrase"] + " " + host[at:])
    return out


@pytest.fixture(scope="module")
def clean_heldout() -> list[str]:
    """Reference text never used as background nor for choosing the threshold: Wikipedia runs 3, 7, 11, ..."""
    return semantic.reference_runs()[3::4]


def test_the_paraphrase_set_is_real_items_reworded():
    rows = paraphrases()
    shipped = {i.item_id: i.text for i in load_items()}
    assert len(rows) >= 40 and len({r["item_id"] for r in rows}) == len(rows)
    assert {r["benchmark"] for r in rows} == {"gsm8k", "mmlu_redux", "humaneval"}
    assert sum(r["half"] == "heldout" for r in rows) == sum(r["half"] == "calibration" for r in rows)
    for r in rows:
        assert shipped[r["item_id"]] == r["original"], r["item_id"]
        assert r["paraphrase"].strip() and r["paraphrase"] != r["original"]


def test_windows_cover_the_text_with_full_windows():
    assert semantic.window_starts(10, 32, 8, 16) == []
    assert semantic.window_starts(20, 32, 8, 16) == [0]
    assert semantic.window_starts(50, 32, 8, 16) == [0, 8, 16, 18]
    for n in range(16, 200, 7):
        starts = semantic.window_starts(n, 32, 8, 16)
        assert starts[0] == 0 and min(n, starts[-1] + 32) == n
        assert all(0 < b - a <= 8 for a, b in zip(starts, starts[1:]))
    text = "one two three, four five!"
    [w] = semantic.windows(semantic.normalise_words(text), 3, size=32, stride=8, min_words=2)
    assert (w.doc, w.first, w.last, text[w.char_start : w.char_end]) == (3, 0, 4, "one two three, four five")


def test_thresholds_are_per_item_and_checked():
    assert semantic.threshold_for("humaneval") == semantic.BENCHMARK_THRESHOLDS["humaneval"]
    assert semantic.threshold_for("registered_later", 0.4) == 0.4
    assert semantic.lexical_for("gsm8k") == semantic.BENCHMARK_LEXICAL["gsm8k"]
    assert semantic.lexical_for("registered_later") == semantic.DEFAULT_LEXICAL
    texts = ["one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen"] * 2
    index = semantic.SemanticIndex.build(texts, threshold=[0.2, 0.5], lexical=[0.3, 0.6], background=texts)
    assert index.threshold.tolist() == [0.2, 0.5] and index.lexical.tolist() == [0.3, 0.6]
    with pytest.raises(ValueError, match="cosine margin"):
        semantic.SemanticIndex.build(texts, threshold=[0.2, 2.5], background=texts)
    with pytest.raises(ValueError, match="share of the item's word weight"):
        semantic.SemanticIndex.build(texts, lexical=1.5, background=texts)


def test_lexical_share_weighs_an_items_words_by_their_rarity():
    background = ["the cat sat", "the dog sat", "the bird flew"]
    idf = semantic.inverse_document_frequency(background)
    assert idf["the"] == pytest.approx(math.log(4 / 4)) and idf["cat"] == pytest.approx(math.log(4 / 2))
    assert semantic.word_weight(idf, 3, "zebra") == pytest.approx(math.log(4))  # unseen: rarest
    weights = {w: semantic.word_weight(idf, 3, w) for w in ("the", "cat", "zebra")}
    assert semantic.lexical_share(weights, {"the"}) == 0.0  # a word in every text carries nothing
    share = semantic.lexical_share(weights, {"the", "zebra"})
    assert share == pytest.approx(math.log(4) / (math.log(2) + math.log(4)))
    assert semantic.lexical_share({}, {"the"}) == 0.0


def test_a_candidate_without_the_items_rare_words_is_not_a_match(clean_heldout):
    rows = paraphrases("heldout")
    thresholds = [semantic.threshold_for(r["benchmark"]) for r in rows]
    docs = inject(rows, clean_heldout)
    index = semantic.SemanticIndex.build([r["original"] for r in rows], threshold=thresholds, lexical=0.0)
    candidates = index.candidates(docs)
    assert candidates and all(0.0 <= c.lexical <= 1.0 and c.score >= index.threshold[c.item] for c in candidates)
    # every candidate confirmed at lexical share 0; none of these reworded items keeps every rare word
    assert {(d, m.item_index) for d, ms in enumerate(index.find_batch(docs)) for m in ms} == {
        (c.doc, c.item) for c in candidates
    }
    index.lexical[:] = 1.0
    assert not any(index.find_batch(docs))


def test_top_k_mean_is_the_mean_of_the_k_best():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(7, 5)).astype(np.float32), rng.normal(size=(40, 5)).astype(np.float32)
    expected = np.sort(q @ k.T, axis=1)[:, -3:].mean(axis=1)
    np.testing.assert_allclose(semantic.top_k_mean(q, k, 3, block=2), expected, rtol=1e-5)


def test_heldout_paraphrases_are_found(clean_heldout):
    # an item's score depends only on the item and its background, so indexing just the paraphrased items
    # gives the same per-item decisions as indexing the whole benchmark
    rows = paraphrases("heldout")
    thresholds = [semantic.threshold_for(r["benchmark"]) for r in rows]
    lexical = [semantic.lexical_for(r["benchmark"]) for r in rows]
    index = semantic.SemanticIndex.build([r["original"] for r in rows], threshold=thresholds, lexical=lexical)
    docs = inject(rows, clean_heldout)
    found = index.find_batch(docs)
    # the same matches, scores and spans whatever the batching (a task's slice decides which documents share one)
    index.batch_windows = 37
    assert [index.find(d) for d in docs] == found
    hits = [any(m.item_index == i for m in found[i]) for i in range(len(rows))]
    assert sum(hits) / len(rows) >= RECALL, [r["item_id"] for r, h in zip(rows, hits) if not h]
    for matches in found:
        for m in matches:
            assert m.kind == "semantic" and m.score >= index.threshold[m.item_index] and m.char_end > m.char_start
    confirmed = {(c.doc, c.item) for c in index.candidates(docs) if c.lexical >= index.lexical[c.item]}
    assert {(d, m.item_index) for d, ms in enumerate(found) for m in ms} == confirmed


def test_window_cache_is_bounded_and_keeps_embeddings_exact():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.array([[len(t), t.count("a")] for t in texts], dtype=np.float32)

    cache = semantic.WindowCache(max_windows=2)
    np.testing.assert_array_equal(cache.embed(["a", "bb", "a"], embed), [[1, 1], [2, 0], [1, 1]])
    assert calls == [["a", "bb"]] and (cache.hits, cache.misses) == (0, 2)
    np.testing.assert_array_equal(cache.embed(["bb", "ccc"], embed), [[2, 0], [3, 0]])
    assert calls[-1] == ["ccc"] and len(cache) == 2  # "a" was the least recently used
    cache.embed(["a"], embed)
    assert calls[-1] == ["a"]
    with pytest.raises(ValueError, match="cache size"):
        semantic.WindowCache(-1)


def test_a_second_benchmark_reuses_window_embeddings_with_the_same_matches(clean_heldout):
    rows = paraphrases("heldout")
    docs = inject(rows, clean_heldout)
    by_benchmark = {b: [r for r in rows if r["benchmark"] == b] for b in ("gsm8k", "mmlu_redux")}
    idx = {
        b: semantic.SemanticIndex.build(
            [r["original"] for r in rs], threshold=semantic.threshold_for(b), lexical=semantic.lexical_for(b)
        )
        for b, rs in by_benchmark.items()
    }
    uncached = {}
    for b, index in idx.items():
        index.cache = None
        uncached[b] = index.find_batch(docs)
    cache = semantic.WindowCache()
    for b, index in idx.items():
        index.cache = cache
        assert index.find_batch(docs) == uncached[b]
    assert cache.misses > 0 and cache.hits >= cache.misses  # the second benchmark embedded nothing again
    assert any(uncached["gsm8k"]) and any(uncached["mmlu_redux"])


def test_a_news_story_on_an_items_topic_is_a_candidate_but_not_a_match():
    # a real news text (held out in the bench) on two-stroke car engines: its window is a semantic neighbour of
    # HumanEval's car race (the margin-only stage flagged it) but shares almost none of the item's rare words
    docs = []
    for path in JSONL_DOCS:
        with open(path, encoding="utf-8") as f:
            docs += [json.loads(line)["text"] for line in f if line.strip()]
    story = docs[1::2][3]
    items = read_benchmark(HUMANEVAL)
    index = semantic.SemanticIndex.build(
        items, threshold=semantic.threshold_for("humaneval"), lexical=semantic.lexical_for("humaneval")
    )
    candidates = index.candidates([story])
    assert "HumanEval/41" in {items[c.item].item_id.split("/", 2)[2] for c in candidates}  # car_race_collision
    assert all(c.lexical < index.lexical[c.item] for c in candidates)
    assert index.find_batch([story]) == [[]]


@pytest.mark.slow
def test_clean_reference_text_is_rarely_flagged_by_any_item(clean_heldout):
    # held-out Wikipedia only: on web text (news, navigation) the rate is higher, see bench/semantic_quarantine.py
    items = load_items()
    benchmarks = [i.item_id.split("/")[0] for i in items]
    index = semantic.SemanticIndex.build(
        items,
        threshold=[semantic.threshold_for(b) for b in benchmarks],
        lexical=[semantic.lexical_for(b) for b in benchmarks],
    )
    flagged = [d for d, m in enumerate(index.find_batch(clean_heldout)) if m]
    assert len(flagged) / len(clean_heldout) <= FP_RATE, len(flagged)


def screen(lakehouse, params: MatchParams) -> tuple[list[dict], decontaminate.Screening]:
    pins = lakehouse.snapshot_ids(decontaminate.UPSTREAM)
    items = decontaminate.pinned_items(lakehouse, "gsm8k", pins[QUARANTINE_EVAL_ITEMS.identifier])
    tasks = decontaminate.plan(lakehouse, items, "TEST-CRAWL", "seg-1", pins, params, uuid.uuid4().hex)
    results = [decontaminate.run_task(t) for t in tasks]
    decontaminate.commit(lakehouse, "gsm8k", "TEST-CRAWL", "seg-1", results, pins, PROVENANCE)
    return lakehouse.scan(QUARANTINE_MATCHES).to_pylist(), decontaminate.Screening.of(results)


def test_semantic_matches_are_rows_beside_unchanged_exact_and_near_ones(lakehouse, clean_heldout):
    items = read_benchmark(GSM8K)
    gsm = [r for r in paraphrases() if r["benchmark"] == "gsm8k"]
    docs = clean_heldout[:12]
    docs[2] = docs[2] + "\n" + items[0].text  # verbatim: an n-gram match, never also a semantic one
    docs[5] = inject(gsm[:1], [docs[5]])[0]  # a paraphrase
    docs[9] = items[11].text.upper().replace(",", "") + "\n" + docs[9]  # light edit
    write_curated(lakehouse, curated_rows(docs, "TEST-CRAWL", "seg-1"), 3)
    writer = lakehouse.writer(QUARANTINE_EVAL_ITEMS, {"benchmark": "gsm8k"})
    writer.write(decontaminate.eval_item_rows(items))
    writer.commit(PROVENANCE)

    without, _ = screen(lakehouse, MatchParams(semantic=False))
    with_semantic, screening = screen(lakehouse, MatchParams(files_per_slice=2))
    assert [r for r in with_semantic if r["kind"] != "semantic"] == without
    semantic_rows = [r for r in with_semantic if r["kind"] == "semantic"]
    assert ("d005", gsm[0]["item_id"]) in {(r["doc_id"], r["item_id"]) for r in semantic_rows}
    assert not {(r["doc_id"], r["item_id"]) for r in semantic_rows} & {(r["doc_id"], r["item_id"]) for r in without}
    assert screening.kinds["semantic"] == len(semantic_rows) and screening.kinds["ngram"] >= 1
    assert screening.semantic_examples[0][0] == semantic_rows[0]["doc_id"]
