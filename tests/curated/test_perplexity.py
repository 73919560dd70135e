"""Document perplexity with our own KenLM model, and CCNet-style head/middle/tail buckets."""

from __future__ import annotations

import lzma
import math
import random
import re

import kenlm
import pytest
from hypothesis import given
from hypothesis import strategies as st

from assets.curated.models import REFERENCE_CORPUS as CORPUS
from assets.curated.ngram_lm import estimate_arpa, lm_tokenize
from assets.curated.perplexity import (
    DocPerplexity,
    PerplexityScorer,
    bucket_thresholds,
    language_bucket,
    language_thresholds,
    percentile_nearest_rank,
    ppl_bucket,
)


def buckets_by_language(langs, ppls, head_pct=30, tail_pct=60):
    """Every document of a partition in one list, bucketed against its own language's percentiles (what
    curated/documents computes from its tasks' (language, perplexity) pairs)."""
    if len(langs) != len(ppls):
        raise ValueError(f"langs and ppls differ in length: {len(langs)} != {len(ppls)}")
    thresholds = language_thresholds(zip(langs, ppls), head_pct, tail_pct)
    return [language_bucket(lang, ppl, thresholds) for lang, ppl in zip(langs, ppls)]


N_TRAIN_ARTICLES = 50  # the first half of the excerpt keeps the build to a few seconds
N_HELD_OUT_ARTICLES = 4  # the last articles, never seen in training
SENTENCE = "the united states is a country in north america ."


def articles() -> list[tuple[str, str]]:
    text = lzma.open(CORPUS, "rt", encoding="utf-8").read()
    return re.findall(r'<doc title="([^"]*)">\n(.*?)\n</doc>', text, re.S)


def shuffled(text: str, seed: int) -> str:
    words = text.split()
    return " ".join(random.Random(seed).sample(words, len(words)))


@pytest.fixture(scope="module")
def corpus_articles():
    found = articles()
    assert len(found) == 104
    return found


@pytest.fixture(scope="module")
def scorer(corpus_articles, tmp_path_factory):
    path = tmp_path_factory.mktemp("lm") / "enwiki_first50_3gram.arpa"
    train = (s for _, body in corpus_articles[:N_TRAIN_ARTICLES] for s in lm_tokenize(body))
    estimate_arpa(train, path, order=3)
    return PerplexityScorer(path)


@pytest.fixture(scope="module")
def held_out_paragraphs(corpus_articles):
    paragraphs = [
        p for _, body in corpus_articles[-N_HELD_OUT_ARTICLES:] for p in body.split("\n") if len(p.split()) >= 30
    ]
    assert len(paragraphs) > 100
    return paragraphs


def test_score_matches_kenlm_perplexity(scorer):
    doc = scorer.score("The United States is a country in North America.")
    assert (doc.n_words, doc.n_sentences) == (10, 1)
    assert doc.perplexity == pytest.approx(scorer.model.perplexity(SENTENCE), rel=1e-9)
    assert doc.log10_prob_per_word == pytest.approx(scorer.model.score(SENTENCE) / 11, rel=1e-9)
    assert doc.perplexity == pytest.approx(10**-doc.log10_prob_per_word)


def test_real_sentence_is_at_least_ten_times_less_perplexing_than_shuffled(scorer):
    real = scorer.score(SENTENCE).perplexity
    for seed in range(5):
        assert scorer.score(shuffled(SENTENCE, seed)).perplexity >= 10 * real


def test_held_out_wikipedia_paragraphs_beat_their_shuffles(scorer, held_out_paragraphs):
    real = [scorer.score(p) for p in held_out_paragraphs]
    mixed = [scorer.score(shuffled(p, i)) for i, p in enumerate(held_out_paragraphs)]
    assert all(r.perplexity < m.perplexity for r, m in zip(real, mixed))

    def pooled(docs: list[DocPerplexity]) -> float:
        n = sum(d.n_words + d.n_sentences for d in docs)
        return 10 ** -(sum(d.log10_prob_per_word * (d.n_words + d.n_sentences) for d in docs) / n)

    assert pooled(mixed) >= 2 * pooled(real)


def test_multi_sentence_document_averages_over_words_and_sentence_ends(scorer):
    text = "Anarchism is a political philosophy.\nIt is old!  Is it?"
    sentences = lm_tokenize(text)
    assert len(sentences) == 3
    doc = scorer.score(text)
    total = sum(scorer.model.score(" ".join(s)) for s in sentences)
    assert doc.n_words == sum(map(len, sentences))
    assert doc.log10_prob_per_word == pytest.approx(total / (doc.n_words + 3))


def test_case_and_spacing_do_not_change_the_score(scorer):
    assert scorer.score("THE United   States is a country in north America .") == scorer.score(SENTENCE)


@pytest.mark.parametrize("text", ["", "   \n\t  "])
def test_text_without_tokens_has_no_perplexity(scorer, text):
    assert scorer.score(text) == DocPerplexity(None, None, 0, 0)


def test_unknown_words_still_get_a_finite_score(scorer):
    doc = scorer.score("zzyzx qwertyuiop flarnbeque")
    assert doc.n_words == 3 and math.isfinite(doc.perplexity) and doc.perplexity > scorer.score(SENTENCE).perplexity


def test_model_path_errors_say_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="build_reference_lm"):
        PerplexityScorer(tmp_path / "missing.arpa")
    packed = tmp_path / "model.arpa.xz"
    packed.write_bytes(b"")
    with pytest.raises(ValueError, match="decompressed"):
        PerplexityScorer(packed)


def test_bucket_thresholds_nearest_rank():
    values = [float(v) for v in range(10, 0, -1)]  # order of input does not matter
    assert bucket_thresholds(values) == (3.0, 6.0)
    buckets = [ppl_bucket(v, (3.0, 6.0)) for v in range(1, 11)]
    assert buckets == ["head"] * 3 + ["middle"] * 3 + ["tail"] * 4


def test_ties_share_a_bucket():
    values = [5.0, 5.0, 5.0, 5.0, 9.0]
    assert bucket_thresholds(values) == (5.0, 5.0)
    assert [ppl_bucket(v, bucket_thresholds(values)) for v in values] == ["head"] * 4 + ["tail"]


def test_single_document_is_head():
    assert bucket_thresholds([42.0]) == (42.0, 42.0)
    assert buckets_by_language(["en"], [42.0]) == ["head"]


def test_unscored_documents_are_skipped_and_get_no_bucket():
    values = [None, 1.0, float("nan"), 2.0, 3.0]
    assert bucket_thresholds(values) == (1.0, 2.0)
    assert ppl_bucket(None, (1.0, 2.0)) is None and ppl_bucket(float("nan"), (1.0, 2.0)) is None
    with pytest.raises(ValueError, match="no scored"):
        bucket_thresholds([None, float("nan")])
    with pytest.raises(ValueError, match="no scored"):
        bucket_thresholds([])


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="head_pct"):
        bucket_thresholds([1.0], head_pct=70, tail_pct=60)
    with pytest.raises(ValueError, match="differ in length"):
        buckets_by_language(["en"], [1.0, 2.0])
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        percentile_nearest_rank([1.0], 101)


def test_buckets_by_language_use_each_languages_own_percentiles():
    langs = ["en", "de", "en", "de", "en", "de", "xx", None, "en"]
    ppls = [10.0, 1000.0, 20.0, 2000.0, 30.0, 3000.0, None, 7.0, 40.0]
    # en: 10, 20, 30, 40 -> p30 = 20 (rank 2), p60 = 30 (rank 3); de: p30 = 1000, p60 = 2000.
    assert buckets_by_language(langs, ppls) == [
        "head",
        "head",
        "head",
        "middle",
        "middle",
        "tail",
        None,
        "head",
        "tail",
    ]


def test_real_and_shuffled_paragraphs_separate_into_buckets(scorer, held_out_paragraphs):
    real = [scorer.score(p).perplexity for p in held_out_paragraphs]
    mixed = [scorer.score(shuffled(p, i)).perplexity for i, p in enumerate(held_out_paragraphs)]
    buckets = buckets_by_language(["en"] * (len(real) + len(mixed)), real + mixed)
    real_buckets, mixed_buckets = buckets[: len(real)], buckets[len(real) :]
    head_real = real_buckets.count("head") / (real_buckets.count("head") + mixed_buckets.count("head"))
    tail_mixed = mixed_buckets.count("tail") / (real_buckets.count("tail") + mixed_buckets.count("tail"))
    assert head_real >= 0.9 and tail_mixed >= 0.75, (head_real, tail_mixed)


finite = st.floats(min_value=1.0, max_value=1e6, allow_nan=False)


@given(st.lists(finite, min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_bucket_properties(values, rng):
    thresholds = bucket_thresholds(values)
    buckets = [ppl_bucket(v, thresholds) for v in values]
    n = len(values)
    # Nearest rank: at least 30% of documents are head and at least 60% are head or middle.
    assert buckets.count("head") >= -(-30 * n // 100)
    assert buckets.count("head") + buckets.count("middle") >= -(-60 * n // 100)
    # A higher perplexity never lands in an earlier bucket.
    rank = {"head": 0, "middle": 1, "tail": 2}
    pairs = sorted(zip(values, (rank[b] for b in buckets)))
    assert all(a[1] <= b[1] for a, b in zip(pairs, pairs[1:]))
    # The input order does not matter.
    permuted = list(values)
    rng.shuffle(permuted)
    assert bucket_thresholds(permuted) == thresholds


languages = st.sampled_from(["en", "de", None])
maybe_ppl = st.one_of(st.none(), st.just(float("nan")), st.sampled_from([5.0, 7.5, 9.0]), finite)


@given(st.lists(st.tuples(languages, maybe_ppl), max_size=60), st.integers(1, 8), st.randoms(use_true_random=False))
def test_cutoffs_from_tasks_in_any_grouping_and_order_give_the_same_buckets(docs, parts, rng):
    """Tasks report their scored (language, perplexity) pairs in any order and grouping; the cut-offs and so
    every document's bucket are those of the whole partition in one list (ties included)."""
    whole = buckets_by_language([lang for lang, _ in docs], [ppl for _, ppl in docs])
    chunks = [docs[i::parts] for i in range(parts)]
    rng.shuffle(chunks)
    reported = [(lang, ppl) for chunk in chunks for lang, ppl in chunk if ppl is not None]
    thresholds = language_thresholds(reported)
    assert [language_bucket(lang, ppl, thresholds) for lang, ppl in docs] == whole


def test_scorer_loads_any_kenlm_model_path(tmp_path):
    path = tmp_path / "tiny.arpa"
    estimate_arpa([["a", "b"], ["a", "c"], ["b"]] * 3, path, order=2, discount_fallback=(0.5, 1.0, 1.5))
    scorer = PerplexityScorer(str(path))
    assert scorer.order == 2 and isinstance(scorer.model, kenlm.Model)
    assert scorer.score("A b.").n_words == 3
