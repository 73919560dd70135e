"""The modified Kneser-Ney estimator: hand-checked discounts and probabilities, normalisation, determinism,
and the reference model estimated on the repo's Wikipedia excerpt (data/corpus/)."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import random
import subprocess
import sys
from pathlib import Path

import kenlm
import pytest

from assets.curated.models import REFERENCE_CORPUS as CORPUS
from assets.curated.ngram_lm import (
    EOS,
    UNK,
    build_reference_lm,
    estimate_arpa,
    lm_tokenize,
    read_corpus_sentences,
)

REPO = Path(__file__).resolve().parents[2]

# Built by hand so that the trigram count-of-counts are t1..t4 = 4, 2, 1, 1:
# "a1 a2 a3 a4" gives 4 trigrams seen once, "b1 b2" twice gives 2 seen twice, and so on.
TINY = [["a1", "a2", "a3", "a4"]] + [["b1", "b2"]] * 2 + [["c1"]] * 3 + [["d1"]] * 4
FALLBACK = (0.5, 1.0, 1.5)


def read_arpa(path: Path) -> dict[str, tuple[float, float | None]]:
    """{n-gram text: (log10 prob, log10 backoff or None)} of every n-gram in an ARPA file."""
    entries: dict[str, tuple[float, float | None]] = {}
    in_section = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("\\"):
            in_section = line.endswith("-grams:")
            continue
        if in_section and line:
            fields = line.split("\t")
            entries[fields[1]] = (float(fields[0]), float(fields[2]) if len(fields) == 3 else None)
    return entries


def model(path: Path) -> kenlm.Model:
    config = kenlm.Config()
    config.show_progress = False
    return kenlm.Model(str(path), config)


def next_word_mass(lm: kenlm.Model, context: list[str], vocab: list[str]) -> float:
    """Sum over the vocabulary of p(w | <s> context), as KenLM computes it with back-off."""
    state = kenlm.State()
    lm.BeginSentenceWrite(state)
    for word in context:
        out = kenlm.State()
        lm.BaseScore(state, word, out)
        state = out
    return sum(10 ** lm.BaseScore(state, word, kenlm.State()) for word in vocab)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.arpa"
    stats = estimate_arpa(TINY, path, order=3, discount_fallback=FALLBACK)
    return path, stats


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The reference model on the whole excerpt (about 10 s on one core)."""
    path = tmp_path_factory.mktemp("reference") / "enwiki_3gram.arpa"
    stats = build_reference_lm(CORPUS, path, order=3)
    return path, stats


def test_lm_tokenize_lowercases_splits_sentences_and_punctuation():
    text = "Don't panic! The U.S. Army, in 1775.\n\nSecond   line?"
    assert lm_tokenize(text) == [
        ["don", "'", "t", "panic", "!"],
        ["the", "u", ".", "s", "."],
        ["army", ",", "in", "1775", "."],
        ["second", "line", "?"],
    ]
    assert lm_tokenize("") == [] and lm_tokenize(" \n\t ") == []


def test_corpus_reader_skips_doc_markup():
    first = list(itertools.islice(read_corpus_sentences(CORPUS), 2))
    assert first[0][:6] == ["anarchism", "is", "a", "political", "philosophy", "that"]
    assert all("doc" not in sentence for sentence in first)


def test_discounts_from_count_of_counts_by_hand(tiny):
    _, stats = tiny
    # Y = 4 / (4 + 2*2) = 0.5; D1 = 1 - 2*0.5*2/4; D2 = 2 - 3*0.5*1/2; D3+ = 3 - 4*0.5*1/1
    assert stats.discounts[2] == pytest.approx((0.5, 1.25, 1.0))
    # Unigram and bigram adjusted counts of this corpus have no t2 / give D2 < 0: the fallback is used.
    assert stats.fallback_orders == (1, 2)
    assert stats.discounts[0] == FALLBACK and stats.discounts[1] == FALLBACK
    # 8 words + </s> + <unk> + <s>; 12 bigrams; 4 + 2 + 1 + 1 trigrams.
    assert stats.ngram_counts == (11, 12, 8)
    assert (stats.n_sentences, stats.n_words) == (10, 4 + 4 + 3 + 4)


def test_tiny_model_probabilities_by_hand(tiny):
    path, _ = tiny
    arpa = read_arpa(path)
    # Unigrams: continuation counts a1..d1 = 1 each, </s> = 4 (after a4, b2, c1, d1); sum 12;
    # gamma = (0.5*8 + 1.5*1) / 12, spread over |V| = 10 (8 words, </s>, <unk>).
    uniform_share = (0.5 * 8 + 1.5) / 12 / 10
    p_d1 = 0.5 / 12 + uniform_share
    p_eos = (4 - 1.5) / 12 + uniform_share
    assert arpa["d1"][0] == pytest.approx(math.log10(p_d1), abs=1e-6)
    assert arpa[EOS][0] == pytest.approx(math.log10(p_eos), abs=1e-6)
    assert arpa[UNK][0] == pytest.approx(math.log10(uniform_share), abs=1e-6)
    assert arpa["<s>"][0] == -99.0
    # Bigram context "d1": only "d1 </s>" (continuation count 1) -> u = 0.5, gamma = 0.5.
    p_eos_d1 = 0.5 + 0.5 * p_eos
    assert arpa["d1 </s>"][0] == pytest.approx(math.log10(p_eos_d1), abs=1e-6)
    assert arpa["d1"][1] == pytest.approx(math.log10(0.5), abs=1e-6)
    # Bigram context "<s>": raw counts a1 1, b1 2, c1 3, d1 4 (sum 10); gamma = (0.5 + 1.0 + 1.5*2) / 10.
    p_d1_bos = (4 - 1.5) / 10 + 0.45 * p_d1
    assert arpa["<s> d1"][0] == pytest.approx(math.log10(p_d1_bos), abs=1e-6)
    assert arpa["<s>"][1] == pytest.approx(math.log10(0.45), abs=1e-6)
    # Trigram "<s> d1 </s>" seen 4 times, D3+ = 1.0 -> u = 3/4, gamma("<s> d1") = 1/4.
    p_eos_bos_d1 = 0.75 + 0.25 * p_eos_d1
    assert arpa["<s> d1 </s>"][0] == pytest.approx(math.log10(p_eos_bos_d1), abs=1e-6)
    assert arpa["<s> d1"][1] == pytest.approx(math.log10(0.25), abs=1e-6)
    # KenLM reads the same numbers back.
    lm = model(path)
    assert lm.score("d1", bos=True, eos=True) == pytest.approx(math.log10(p_d1_bos * p_eos_bos_d1), abs=1e-5)


@pytest.mark.parametrize("context", [[], ["a1"], ["a2", "a3"], ["b2", "a1"], ["zz", "a4"], ["d1", "a2"]])
def test_tiny_model_sums_to_one_over_vocabulary(tiny, context):
    path, _ = tiny
    vocab = [gram for gram in read_arpa(path) if " " not in gram and gram != "<s>"]
    assert len(vocab) == 10
    assert next_word_mass(model(path), context, vocab) == pytest.approx(1.0, abs=1e-5)


def test_too_small_corpus_without_fallback_says_what_to_do(tmp_path):
    # Unigram continuation counts: eight words with 1, </s> with 4.
    with pytest.raises(ValueError, match=r"1-grams: count-of-counts t1..t4 = \[8, 0, 0, 1\].*discount_fallback"):
        estimate_arpa(TINY, tmp_path / "x.arpa")


@pytest.mark.parametrize("bad", ["<s>", "</s>", "<unk>", "two words", ""])
def test_words_an_arpa_file_cannot_hold_are_refused(tmp_path, bad):
    with pytest.raises(ValueError, match="cannot hold"):
        estimate_arpa(TINY + [["x", bad, "y"]], tmp_path / "x.arpa", discount_fallback=FALLBACK)


def test_empty_input_and_order_one_are_refused(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        estimate_arpa([[], []], tmp_path / "x.arpa")
    with pytest.raises(ValueError, match="order"):
        estimate_arpa(TINY, tmp_path / "x.arpa", order=1)


def test_higher_order_on_tiny_corpus_loads_and_normalises(tmp_path):
    path = tmp_path / "tiny5.arpa"
    stats = estimate_arpa(TINY, path, order=5, discount_fallback=FALLBACK)
    lm = model(path)
    assert lm.order == 5 and len(stats.ngram_counts) == 5
    vocab = [gram for gram in read_arpa(path) if " " not in gram and gram != "<s>"]
    assert next_word_mass(lm, ["a1", "a2", "a3"], vocab) == pytest.approx(1.0, abs=1e-5)


_BUILD_SUBSET = """
import itertools, sys
from assets.curated.ngram_lm import estimate_arpa, read_corpus_sentences
estimate_arpa(itertools.islice(read_corpus_sentences(sys.argv[1]), 2500), sys.argv[2], order=3)
"""


def test_two_builds_with_different_hash_seeds_are_byte_identical(tmp_path):
    digests = []
    for seed in ("0", "4242"):
        out = tmp_path / f"seed{seed}.arpa"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "-c", _BUILD_SUBSET, str(CORPUS), str(out)], env=env, check=True)
        digests.append(hashlib.sha256(out.read_bytes()).hexdigest())
    assert digests[0] == digests[1]
    # ...and to a build in this process (yet another hash seed) from the same sentences in reverse order:
    # all sums are integer counts, so the model depends on the multiset of sentences only.
    here = tmp_path / "here.arpa"
    sentences = list(itertools.islice(read_corpus_sentences(CORPUS), 2500))
    estimate_arpa(reversed(sentences), here, order=3)
    assert hashlib.sha256(here.read_bytes()).hexdigest() == digests[0]
    assert not list(tmp_path.glob("*.partial"))


def test_reference_model_counts_and_bytes_are_pinned(reference):
    path, stats = reference
    assert stats.ngram_counts == (33946, 242092, 427157)
    assert (stats.n_sentences, stats.n_words) == (23487, 547459)
    assert stats.fallback_orders == ()
    assert all(0 < d1 < d2 < d3 < 3 for d1, d2, d3 in stats.discounts)
    header = path.read_text(encoding="utf-8").split("\n\n", 1)[0]
    assert header == "\\data\\\nngram 1=33946\nngram 2=242092\nngram 3=427157"
    # The same bytes on every machine: a change here is a changed model (or a platform whose log10 differs).
    assert hashlib.sha256(path.read_bytes()).hexdigest() == (
        "305e04f3a845fa796ca7bef67aeaedf77d97c255c70c7ad5c49586d1297f740c"
    )


def test_reference_model_loads_in_kenlm_and_prefers_real_word_order(reference):
    path, _ = reference
    lm = model(path)
    assert lm.order == 3
    sentence = "the united states is a country in north america ."
    ppl = lm.perplexity(sentence)
    # The IRSTLM model estimated on the same text (../shared/data/lm/) gives 15.0.
    assert ppl == pytest.approx(14.95, abs=0.05)
    words = sentence.split()
    for seed in range(5):
        shuffled = random.Random(seed).sample(words, len(words))
        assert lm.perplexity(" ".join(shuffled)) >= 10 * ppl, shuffled
