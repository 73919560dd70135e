"""Word normalisation, stable n-gram hashes, the n-gram index and the near-match index, on real eval items."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from assets.quarantine.benchmarks import EvalItem, load_items
from assets.quarantine.near_match import NearMatchIndex, find_matches
from assets.quarantine.ngrams import Match, NgramIndex, ngram_hashes, normalise_words, word_hashes

REPO = Path(__file__).resolve().parents[2]
HOST = (
    "Anarchism is a political philosophy that advocates self-governed societies based on voluntary "
    "institutions. These are often described as stateless societies, although several authors have defined "
    "them more specifically as institutions based on non-hierarchical free associations."
)


@pytest.fixture(scope="module")
def items() -> list[EvalItem]:
    return load_items()


@pytest.fixture(scope="module")
def by_id(items) -> dict[str, int]:
    return {item.item_id: k for k, item in enumerate(items)}


@pytest.fixture(scope="module")
def ngram_index(items) -> NgramIndex:
    return NgramIndex.build(items)


@pytest.fixture(scope="module")
def near_index(items) -> NearMatchIndex:
    return NearMatchIndex.build(items)


def embed(piece: str) -> tuple[str, int, int]:
    """HOST with `piece` after its first sentence; returns (text, start, end) of the piece."""
    cut = HOST.index(" These")
    return HOST[:cut] + " " + piece + HOST[cut:], cut + 1, cut + 1 + len(piece)


# --- normalisation and hashing ------------------------------------------------------------------------------


def test_normalise_words_lowercases_strips_punctuation_and_keeps_original_spans():
    text = "Janet\u2019s ducks lay 16 eggs; DON'T  café-au-lait, x_y 3.5"
    norm = normalise_words(text)
    assert norm.words == ["janets", "ducks", "lay", "16", "eggs", "dont", "cafe", "au", "lait", "x", "y", "3", "5"]
    assert [text[s:e] for s, e in zip(norm.starts, norm.ends)] == [
        "Janet\u2019s",
        "ducks",
        "lay",
        "16",
        "eggs",
        "DON'T",
        "café",
        "au",
        "lait",
        "x",
        "y",
        "3",
        "5",
    ]
    assert len(normalise_words(" \n.,;!? ")) == 0


@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80))
def test_each_word_is_the_normalisation_of_its_own_span(text):
    norm = normalise_words(text)
    assert list(norm.starts) == sorted(norm.starts)
    assert all(e > s for s, e in zip(norm.starts, norm.ends))
    assert all(norm.ends[:-1] <= norm.starts[1:])
    for word, s, e in zip(norm.words, norm.starts, norm.ends):
        assert normalise_words(text[s:e]).words == [word]


def test_hashes_are_pinned_so_stored_indexes_stay_valid():
    # Changing the normalisation or the hash scheme changes these values: that is a format change.
    assert word_hashes(["hello"]).tolist() == [9022087748821825191]
    norm = normalise_words("Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning")
    assert ngram_hashes(norm.hashes, 13).tolist() == [7626016522828387318, 13403602418774238401]


def test_ngram_hashes_are_per_window_and_order_sensitive():
    h = normalise_words(HOST).hashes
    vectorised = ngram_hashes(h, 5)
    assert vectorised.tolist() == [int(ngram_hashes(h[j : j + 5], 5)[0]) for j in range(len(h) - 4)]
    assert len(set(vectorised.tolist())) == len(vectorised)
    swapped = h.copy()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert ngram_hashes(swapped, 5)[0] != vectorised[0]
    assert ngram_hashes(h[:4], 4)[0] != ngram_hashes(h[:5], 5)[0]  # the length is part of the hash
    assert len(ngram_hashes(h[:3], 5)) == 0


def test_hashes_do_not_depend_on_pythonhashseed():
    code = (
        "from assets.quarantine.ngrams import normalise_words, ngram_hashes;"
        f"print(ngram_hashes(normalise_words({HOST!r}).hashes, 13).sum())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)},
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {f"{ngram_hashes(normalise_words(HOST).hashes, 13).sum()}\n"}


# --- n-gram index -------------------------------------------------------------------------------------------


def test_index_is_compact_and_reports_its_memory(ngram_index, items):
    assert ngram_index.n == 13 and len(ngram_index.ngram_counts) == len(items)
    assert np.all(ngram_index.hashes[:-1] <= ngram_index.hashes[1:])
    assert ngram_index.nbytes == (
        ngram_index.hashes.nbytes
        + ngram_index.item_indexes.nbytes
        + ngram_index.ngram_counts.nbytes
        + ngram_index.short_keys.nbytes
        + ngram_index.short_items.nbytes
        + ngram_index.short_full.nbytes
        + ngram_index.short_lengths.nbytes
    )
    assert ngram_index.nbytes < 12 * len(ngram_index) + 8 * len(items)
    assert len(ngram_index.short_keys) == 87  # MMLU-Redux items of 7-12 words, indexed whole


def test_verbatim_item_is_found_with_its_exact_span(ngram_index, items, by_id):
    k = by_id["gsm8k/test/0"]
    text, start, end = embed(items[k].text)
    assert ngram_index.find(text) == [Match(k, "ngram", 1.0, start, end)]
    assert ngram_index.find(HOST) == []
    assert ngram_index.find("") == []


def test_case_punctuation_and_whitespace_do_not_matter(ngram_index, items, by_id):
    k = by_id["humaneval/test/HumanEval/0"]
    mangled = " ".join(items[k].text.upper().replace(":", "").replace("(", " ").split())
    (match,) = [m for m in ngram_index.find(mangled) if m.item_index == k]
    assert (match.score, match.char_start, match.char_end) == (1.0, 0, len(mangled))


def test_partial_copy_reports_the_share_of_the_item(ngram_index, items, by_id):
    k = by_id["gsm8k/test/1"]
    norm = normalise_words(items[k].text)
    half = items[k].text[: norm.ends[len(norm) // 2]]
    text, start, end = embed(half)
    (match,) = [m for m in ngram_index.find(text) if m.item_index == k]
    n_grams = len(set(ngram_hashes(norm.hashes, 13).tolist()))
    assert match.score == pytest.approx((len(norm) // 2 + 1 - 12) / n_grams)
    assert (match.char_start, match.char_end) == (start, end)


def test_twelve_words_of_an_item_are_not_a_match(ngram_index, items, by_id):
    k = by_id["gsm8k/test/2"]
    norm = normalise_words(items[k].text)
    assert ngram_index.find(embed(items[k].text[norm.starts[3] : norm.ends[14]])[0]) == []
    (match,) = ngram_index.find(embed(items[k].text[norm.starts[3] : norm.ends[15]])[0])
    assert match.item_index == k


def test_short_items_are_found_whole_and_only_whole(ngram_index, items, by_id):
    k = by_id["mmlu_redux/abstract_algebra/86"]  # "Find the characteristic of the ring Z_3 x Z_3.\n0\n3\n12\n30"
    assert len(normalise_words(items[k].text)) == 15
    seven = [i for i, item in enumerate(items) if len(normalise_words(item.text)) == 7]
    assert len(seven) == 1
    text, start, end = embed(items[seven[0]].text)  # "(1+i)^10 =\n1\ni\n32\n32i": the span starts at "1"
    assert ngram_index.find(text) == [Match(seven[0], "ngram", 1.0, start + 1, end)]
    shorter = items[seven[0]].text.rsplit("\n", 1)[0]  # the last choice dropped
    assert ngram_index.find(embed(shorter)[0]) == []


def test_items_below_min_words_are_not_indexed():
    index = NgramIndex.build(["the cat sat", "one two three four five six"], n=13, min_words=5)
    assert index.ngram_counts.tolist() == [0, 1]
    assert index.find("and the cat sat down") == []
    assert [m.item_index for m in index.find("so: one two three four five six!")] == [1]


def test_an_item_found_twice_gives_one_match_spanning_both(ngram_index, items, by_id):
    k = by_id["gsm8k/test/3"]
    text = items[k].text + "\n" + HOST + "\n" + items[k].text
    assert ngram_index.find(text) == [Match(k, "ngram", 1.0, 0, len(text))]


# --- near matches -------------------------------------------------------------------------------------------


def substitute(text: str, positions: list[int], replacement: str = "zebra") -> str:
    norm = normalise_words(text)
    for p in sorted(positions, reverse=True):
        text = text[: norm.starts[p]] + replacement + text[norm.ends[p] :]
    return text


def test_two_substitutions_in_a_short_item_are_a_near_match(ngram_index, near_index, items, by_id):
    k = by_id["mmlu_redux/anatomy/19"]  # "Which of the following allows air to pass into the lungs?\n..." (15 words)
    edited = substitute(items[k].text, [4, 9]).lower().replace("?", "")
    text, start, end = embed(edited)
    assert ngram_index.find(text) == []  # every 13-gram is broken
    (match,) = near_index.find(text)
    assert (match.item_index, match.kind) == (k, "near")
    assert match.score == pytest.approx(13 / 15)
    assert (match.char_start, match.char_end) == (start, end)
    assert find_matches(text, ngram_index, near_index) == [match]


def test_too_many_substitutions_fall_below_the_threshold(near_index, items, by_id):
    k = by_id["mmlu_redux/anatomy/19"]
    assert near_index.find(embed(substitute(items[k].text, [1, 4, 9]))[0])[0].score == pytest.approx(12 / 15)
    assert near_index.find(embed(substitute(items[k].text, [1, 4, 7, 9]))[0]) == []  # 11 / 15 < 0.8


def test_near_matching_skips_items_already_found(ngram_index, near_index, items, by_id):
    k = by_id["gsm8k/test/5"]
    text = embed(items[k].text)[0]
    assert [m.item_index for m in near_index.find(text)] == [k]
    assert near_index.find(text, skip_items={k}) == []
    assert [(m.item_index, m.kind) for m in find_matches(text, ngram_index, near_index)] == [(k, "ngram")]


def test_near_index_covers_items_of_at_least_min_words(near_index, items):
    lengths = np.array([len(normalise_words(item.text)) for item in items])
    assert len(near_index.votes_needed) == len(items)
    assert not near_index.votes_needed[lengths < 8].any()
    assert near_index.n_matchable >= 0.999 * np.count_nonzero(lengths >= 8)
    assert near_index.nbytes > 0


def test_near_matches_need_the_words_in_order(near_index, items, by_id):
    k = by_id["mmlu_redux/anatomy/19"]
    words = normalise_words(items[k].text).words
    assert near_index.find(" ".join(reversed(words))) == []
    assert near_index.find(" ".join(sorted(words))) == []


def test_threshold_is_validated():
    with pytest.raises(ValueError, match="threshold must be in"):
        NearMatchIndex.build(["a b c d e f g h i j"], threshold=1.5)
