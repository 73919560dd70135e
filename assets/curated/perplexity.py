"""Document perplexity under a KenLM n-gram model, and CCNet-style head/middle/tail buckets.

The text is prepared with `ngram_lm.lm_tokenize`, the same function the reference model was estimated
with, so any KenLM model (ARPA or binary) estimated on lower-cased, regex-tokenised sentences fits.
Perplexity follows KenLM and CCNet: every sentence is scored with <s> ... </s>, and the log10
probability is averaged over the words plus one </s> per sentence. A text with no token at all (empty,
white space) gets None for both numbers and no bucket, never NaN.

Buckets follow CCNet (`cc_net/perplexity.py`): per language, head is perplexity <= the 30th percentile,
middle <= the 60th, tail above. Percentiles here use the nearest-rank method on the sorted perplexities,
so a threshold is always an observed value and ties land in the same bucket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

import kenlm

from assets.curated.ngram_lm import lm_tokenize

Bucket = Literal["head", "middle", "tail"]

HEAD_PCT = 30  # CCNet's head cut-off percentile
TAIL_PCT = 60  # CCNet's middle/tail cut-off percentile


@dataclass(frozen=True)
class DocPerplexity:
    """A document's score; for a text without a single token the two floats are None and n_words is 0."""

    log10_prob_per_word: float | None
    perplexity: float | None
    n_words: int  # tokens from lm_tokenize, without the </s> that each sentence also predicts
    n_sentences: int


class PerplexityScorer:
    """Scores texts with a KenLM model loaded from a local ARPA or binary file."""

    def __init__(self, model_path: str | Path):
        """Load the model at `model_path` (ARPA or KenLM binary; the `kenlm` module cannot read .xz)."""
        path = Path(model_path)
        if not path.is_file():
            raise FileNotFoundError(
                f"language model {str(path)!r} does not exist; build one with "
                "assets.curated.ngram_lm.build_reference_lm(corpus, out_path) or point to your own ARPA/binary file"
            )
        if path.suffix in (".xz", ".gz", ".bz2"):
            raise ValueError(f"language model {str(path)!r} is compressed; the kenlm module needs it decompressed")
        self.model_path = path
        config = kenlm.Config()
        config.show_progress = False  # the loader's progress bar would go to stderr of every worker
        self.model = kenlm.Model(str(path), config)
        self.order: int = self.model.order

    def score(self, text: str) -> DocPerplexity:
        """Perplexity of `text`: 10 ** -(sum of log10 p over words and </s>) / (n_words + n_sentences)."""
        sentences = lm_tokenize(text)
        if not sentences:
            return DocPerplexity(log10_prob_per_word=None, perplexity=None, n_words=0, n_sentences=0)
        score = self.model.score  # bos and eos default to True: every sentence is scored with <s> ... </s>
        scores = [score(" ".join(words)) for words in sentences]
        n_words = sum(map(len, sentences))
        per_word = math.fsum(scores) / (n_words + len(scores))
        return DocPerplexity(
            log10_prob_per_word=per_word,
            perplexity=10.0**-per_word,
            n_words=n_words,
            n_sentences=len(scores),
        )


def _scored(perplexities: Sequence[float | None]) -> list[float]:
    return [p for p in perplexities if p is not None and not math.isnan(p)]


def percentile_nearest_rank(sorted_values: Sequence[float], pct: float) -> float:
    """The nearest-rank `pct`-th percentile of ascending values: the ceil(pct/100 * n)-th smallest (n >= 1)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= pct <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {pct}")
    # Exact rational arithmetic: in floats 0.3 * 10 is not 3 for every way of writing it.
    rank = max(1, math.ceil(Fraction(pct) * len(sorted_values) / 100))
    return sorted_values[rank - 1]


def bucket_thresholds(
    perplexities: Sequence[float | None], head_pct: float = HEAD_PCT, tail_pct: float = TAIL_PCT
) -> tuple[float, float]:
    """(p_head, p_tail) nearest-rank percentiles of the scored perplexities; None and NaN are left out."""
    if head_pct > tail_pct:
        raise ValueError(f"head_pct ({head_pct}) must not exceed tail_pct ({tail_pct})")
    values = sorted(_scored(perplexities))
    if not values:
        raise ValueError("no scored perplexities to take percentiles of (all are None/NaN or the list is empty)")
    return percentile_nearest_rank(values, head_pct), percentile_nearest_rank(values, tail_pct)


def ppl_bucket(ppl: float | None, thresholds: tuple[float, float]) -> Bucket | None:
    """'head' if ppl <= p_head, 'middle' if <= p_tail, else 'tail'; None for an unscored (None/NaN) document."""
    if ppl is None or math.isnan(ppl):
        return None
    head, tail = thresholds
    if ppl <= head:
        return "head"
    if ppl <= tail:
        return "middle"
    return "tail"


def language_thresholds(
    pairs: Iterable[tuple[str | None, float | None]], head_pct: float = HEAD_PCT, tail_pct: float = TAIL_PCT
) -> dict[str | None, tuple[float, float]]:
    """(p_head, p_tail) per language over its scored perplexities, from (language, perplexity) pairs in any
    order; a language without a scored document has none."""
    by_lang: dict[str | None, list[float | None]] = {}
    for lang, ppl in pairs:
        by_lang.setdefault(lang, []).append(ppl)
    return {lang: bucket_thresholds(values, head_pct, tail_pct) for lang, values in by_lang.items() if _scored(values)}


def language_bucket(
    lang: str | None, ppl: float | None, thresholds: Mapping[str | None, tuple[float, float]]
) -> Bucket | None:
    """The bucket of one document against its language's thresholds; None where unscored."""
    return ppl_bucket(ppl, thresholds[lang]) if lang in thresholds else None
