"""Must-show of the evaluation quarantine: real eval items injected into real documents are found, and the
untouched real documents are (almost) never flagged.

300 injections of each kind (100 per benchmark: GSM8K, HumanEval, MMLU-Redux), see tests/quarantine/injection.py:
verbatim items, fragments of 13-40 consecutive words, and light edits (case, punctuation, whitespace, one or
two words substituted). An injection counts as found when a match names the injected item and its span
overlaps the injected text. Run with `pytest -s` to see the recall table and every false positive.
"""

from __future__ import annotations

from collections import Counter

import pytest

from assets.quarantine.benchmarks import EvalItem, load_items
from assets.quarantine.near_match import NearMatchIndex, find_matches
from assets.quarantine.ngrams import Match, NgramIndex, normalise_words
from tests.quarantine.injection import KINDS, Injection, build_injections, real_documents

MAX_FALSE_POSITIVE_RATE = 0.005  # of the untouched documents
MIN_RECALL = {"verbatim": 1.0, "fragment": 1.0, "edited": 0.9}


@pytest.fixture(scope="module")
def items() -> list[EvalItem]:
    return load_items()


@pytest.fixture(scope="module")
def indexes(items) -> tuple[NgramIndex, NearMatchIndex]:
    return NgramIndex.build(items), NearMatchIndex.build(items)


@pytest.fixture(scope="module")
def documents() -> list[str]:
    return real_documents()


@pytest.fixture(scope="module")
def injections(items, documents) -> list[Injection]:
    return build_injections(items, documents, per_kind_per_benchmark=100, seed=13)


@pytest.fixture(scope="module")
def found(injections, indexes) -> list[list[Match]]:
    """Per injection: the matches of the injected item whose span overlaps the injected text."""
    ngram_index, near_index = indexes
    return [
        [
            m
            for m in find_matches(inj.text, ngram_index, near_index)
            if m.item_index == inj.item_index and m.char_start < inj.char_end and m.char_end > inj.char_start
        ]
        for inj in injections
    ]


def test_the_injection_set_is_real_and_balanced(items, documents, injections):
    assert len(documents) > 1400
    per_kind = Counter((inj.kind, items[inj.item_index].benchmark) for inj in injections)
    assert per_kind == {(k, b): 100 for k in KINDS for b in ("gsm8k", "humaneval", "mmlu_redux")}
    for inj in injections:
        host = documents[inj.host_index]
        assert inj.text[: inj.char_start - 1] + inj.text[inj.char_end + 1 :] == host
    edited = [inj for inj in injections if inj.kind == "edited"]
    assert all(inj.text[inj.char_start : inj.char_end] != items[inj.item_index].text for inj in edited)
    # The edits matter: a good share of them leave no exact 13-gram of a short item.
    short = [inj for inj in edited if len(normalise_words(items[inj.item_index].text)) < 41]
    assert len(short) >= 40


def test_recall_per_kind(injections, found, items, indexes):
    recall = {}
    for kind in KINDS:
        hits = [bool(f) for inj, f in zip(injections, found) if inj.kind == kind]
        recall[kind] = sum(hits) / len(hits)
    ngram_index, _ = indexes
    edited = [inj for inj in injections if inj.kind == "edited"]
    by_ngrams_alone = sum(any(m.item_index == inj.item_index for m in ngram_index.find(inj.text)) for inj in edited)
    print(f"\nrecall: {recall}; edited found by 13-grams alone: {by_ngrams_alone}/{len(edited)}")
    for inj, f in zip(injections, found):
        if not f:
            piece = inj.text[inj.char_start : inj.char_end]
            print(f"  missed {inj.kind} {items[inj.item_index].item_id}: {piece!r:.200}")
    for kind, minimum in MIN_RECALL.items():
        assert recall[kind] >= minimum, kind


def test_exact_copies_are_located_to_the_injected_words(injections, found):
    """Verbatim items and fragments: the n-gram match covers the whole injected text (it may run a word or
    two past it where the host's next word happens to continue the item)."""
    for inj, f in zip(injections, found):
        if inj.kind == "edited":
            continue
        (match,) = [m for m in f if m.kind == "ngram"]
        piece = normalise_words(inj.text[inj.char_start : inj.char_end])  # from its first word to its last
        first, last = inj.char_start + piece.starts[0], inj.char_start + piece.ends[-1]
        assert match.char_start <= first and match.char_end >= last
        assert first - match.char_start <= 40 and match.char_end - last <= 40
        if inj.kind == "verbatim":
            assert match.score == 1.0


def test_near_matching_finds_the_edited_short_items_that_13_grams_miss(injections, items, indexes):
    ngram_index, near_index = indexes
    short = [
        inj for inj in injections if inj.kind == "edited" and len(normalise_words(items[inj.item_index].text)) < 41
    ]
    by_near = [any(m.item_index == inj.item_index for m in near_index.find(inj.text)) for inj in short]
    by_ngram = [any(m.item_index == inj.item_index for m in ngram_index.find(inj.text)) for inj in short]
    print(f"\nedited items < 41 words: near {sum(by_near)}/{len(short)}, 13-grams {sum(by_ngram)}/{len(short)}")
    assert sum(by_near) >= 0.9 * len(short)
    assert sum(by_near) > sum(by_ngram)


def test_false_positives_on_untouched_documents(documents, indexes, items):
    ngram_index, near_index = indexes
    flagged = 0
    for k, doc in enumerate(documents):
        matches = find_matches(doc, ngram_index, near_index)
        flagged += bool(matches)
        for m in matches:
            print(
                f"\nfalse positive: document {k} [{m.char_start}:{m.char_end}] {m.kind} {m.score:.3f} "
                f"{items[m.item_index].item_id}: {doc[m.char_start : m.char_end]!r:.300}"
            )
    print(f"\nfalse positives: {flagged} of {len(documents)} documents")
    assert flagged <= MAX_FALSE_POSITIVE_RATE * len(documents)
