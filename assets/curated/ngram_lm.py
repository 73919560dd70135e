"""A deterministic word n-gram estimator: interpolated modified Kneser-Ney, written as an ARPA file.

The `kenlm` module that installs from PyPI can query models but cannot estimate them (no `lmplz`), so
tokenlake estimates its reference model itself. The estimate follows Chen & Goodman (1998) the way
KenLM's `lmplz` does:

* adjusted counts: the raw count at the highest order and for n-grams that start with ``<s>`` (nothing
  can precede them); otherwise the continuation count, i.e. the number of distinct words seen to the left;
* three discounts per order, D1, D2, D3+, from the count-of-counts t1..t4 of the adjusted counts
  (Chen & Goodman eq. 26): ``Y = t1 / (t1 + 2 t2)``, ``Dk = k - (k + 1) Y t(k+1) / tk``;
* interpolation: ``p(w|h) = (a(hw) - D(a(hw))) / sum_x a(hx) + gamma(h) p(w|h')`` with
  ``gamma(h) = (D1 N1(h.) + D2 N2(h.) + D3 N3+(h.)) / sum_x a(hx)``, unigrams interpolated with the
  uniform distribution over the vocabulary (which holds ``</s>`` and ``<unk>`` but not ``<s>``).

Because the model is interpolated, the ARPA probability of a stored n-gram is the interpolated one and
its backoff weight is ``gamma`` of that n-gram as a context, so a back-off reader (KenLM) reproduces the
interpolated distribution exactly.

Output is byte-identical across runs, machines and PYTHONHASHSEED values: n-grams are written sorted,
every float goes through one fixed format, denominators and count-of-counts are exact integers, and no
set or hash order reaches the file.
"""

from __future__ import annotations

import lzma
import math
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

BOS = "<s>"
EOS = "</s>"
UNK = "<unk>"
_SPECIAL = frozenset((BOS, EOS, UNK))

# ARPA's conventional log10 probability for <s>, which is only ever a context, never predicted.
_BOS_LOG10_PROB = -99.0

# Sentence ends: ., ! or ? followed by white space. Crude (it splits after "i.e."), but cheap,
# deterministic and identical at estimation and scoring time, which is what the perplexity needs.
# Written as r"(?<=[.!?])\s+" reads; a leading class lets re skip to white space instead of looking behind at
# every position (same splits, ~30% less CPU).
_SENTENCE_END = re.compile(r"\s(?<=[.!?]\s)\s*")
# A token is a run of word characters or one other non-space character ("don't" -> don ' t),
# the tokenisation of the reference IRSTLM model in ../shared/data/lm/.
# The tokens of r"\w+|[^\w\s]", written as one leading \S (a fast class scan over white space) then the rest of
# a word run (~20% less CPU).
_TOKEN = re.compile(r"\S(?:(?<=\w)\w*|)")
# Article markup of the gensim Wikipedia excerpt: <doc title="..."> ... </doc>.
_DOC_MARKUP = re.compile(r"^\s*(<doc\b[^>]*>|</doc>)\s*$")


def lm_tokenize(text: str) -> list[list[str]]:
    """Split text into sentences of lower-cased regex tokens; the one preparation for estimation and scoring."""
    sentences: list[list[str]] = []
    for line in text.lower().splitlines():
        for sentence in _SENTENCE_END.split(line):
            words = _TOKEN.findall(sentence)
            if words:
                sentences.append(words)
    return sentences


def read_corpus_sentences(corpus_path: str | Path) -> Iterator[list[str]]:
    """Stream the `lm_tokenize` sentences of a .txt or .txt.xz corpus, skipping <doc ...>/</doc> lines."""
    path = Path(corpus_path)
    opener = lzma.open if path.suffix == ".xz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if _DOC_MARKUP.match(line):
                continue
            yield from lm_tokenize(line)


@dataclass(frozen=True)
class ArpaStats:
    """What an estimate wrote: n-gram counts and the (D1, D2, D3+) discounts, both indexed by order - 1."""

    order: int
    ngram_counts: tuple[int, ...]
    discounts: tuple[tuple[float, float, float], ...]
    fallback_orders: tuple[int, ...]
    n_sentences: int
    n_words: int


def _discounts(
    adjusted: dict[tuple[str, ...], int], order: int, fallback: tuple[float, float, float] | None
) -> tuple[tuple[float, float, float], bool]:
    """Modified Kneser-Ney discounts of one order from its count-of-counts (Chen & Goodman eq. 26)."""
    t = [0] * 5
    for count in adjusted.values():
        if 0 < count < 5:
            t[count] += 1
    problem = None
    if min(t[1:]) == 0:
        problem = f"count-of-counts t1..t4 = {t[1:]} has a zero"
    else:
        y = t[1] / (t[1] + 2 * t[2])
        found = tuple(k - (k + 1) * y * t[k + 1] / t[k] for k in (1, 2, 3))
        bad = [(k, d) for k, d in zip((1, 2, 3), found) if not 0.0 <= d <= k]
        if not bad:
            return found, False  # type: ignore[return-value]
        problem = f"discounts {found} fall outside [0, k] (count-of-counts t1..t4 = {t[1:]})"
    if fallback is None:
        raise ValueError(
            f"cannot compute modified Kneser-Ney discounts for {order}-grams: {problem}; the corpus is "
            "too small or artificial. Estimate on more text, or pass discount_fallback=(0.5, 1.0, 1.5)."
        )
    return fallback, True


def _adjusted_counts(sentences: Iterable[list[str]], order: int) -> tuple[list[dict], int, int]:
    """Adjusted counts per order (index order - 1); also the number of sentences and words read."""
    top: Counter[tuple[str, ...]] = Counter()
    bos_prefixed: list[Counter[tuple[str, ...]]] = [Counter() for _ in range(order)]
    n_sentences = n_words = 0
    for words in sentences:
        if not words:
            continue
        n_sentences += 1
        n_words += len(words)
        padded = (BOS, *words, EOS)
        top.update(zip(*(padded[i:] for i in range(order))))
        # Grams that start at <s> have no left context, so they keep raw counts at every order;
        # those shorter than `order` are not inside any top-order gram and must be counted here.
        for n in range(2, min(order - 1, len(padded)) + 1):
            bos_prefixed[n - 1][padded[:n]] += 1

    adjusted: list[dict[tuple[str, ...], int]] = [dict() for _ in range(order)]
    adjusted[order - 1] = dict(top)
    for n in range(order - 1, 0, -1):
        continuation: Counter[tuple[str, ...]] = Counter()
        # Every gram that does not start with <s> is the suffix of at least one gram one order up,
        # so the distinct left extensions are exactly the keys of the next order.
        for gram in adjusted[n]:
            continuation[gram[1:]] += 1
        continuation.update(bos_prefixed[n - 1])
        adjusted[n - 1] = dict(continuation)
    return adjusted, n_sentences, n_words


def _format(value: float) -> str:
    text = f"{value:.6f}"
    return "0.000000" if text == "-0.000000" else text


def estimate_arpa(
    sentences: Iterable[list[str]],
    out_path: str | Path,
    order: int = 3,
    *,
    discount_fallback: tuple[float, float, float] | None = None,
) -> ArpaStats:
    """Estimate an interpolated modified Kneser-Ney `order`-gram model and write it as ARPA to `out_path`.

    `sentences` are token lists (use `lm_tokenize`); `discount_fallback`, as in lmplz, replaces the
    discounts of an order whose count-of-counts cannot give valid ones (tiny corpora); without it that raises.
    """
    if order < 2:
        raise ValueError(f"order must be at least 2, got {order}")
    adjusted, n_sentences, n_words = _adjusted_counts(sentences, order)
    if n_sentences == 0:
        raise ValueError("no sentences to estimate from: the corpus is empty after lm_tokenize")

    unigrams = adjusted[0]
    bad_words = sorted(g[0] for g in unigrams if g[0] in (BOS, UNK) or not g[0] or any(c.isspace() for c in g[0]))
    # A literal </s> inside a sentence is the only way a gram can continue after </s>.
    if any(g[0] == EOS for g in adjusted[1]):
        bad_words.append(EOS)
    if bad_words:
        raise ValueError(
            f"sentences contain words an ARPA file cannot hold: {bad_words[:5]}; words must be non-empty, "
            f"without white space, and not {sorted(_SPECIAL)} (tokenise with lm_tokenize)"
        )
    unigrams[(UNK,)] = 0

    discounts: list[tuple[float, float, float]] = []
    fallback_orders: list[int] = []
    for n in range(1, order + 1):
        found, fell_back = _discounts(adjusted[n - 1], n, discount_fallback)
        discounts.append(found)
        if fell_back:
            fallback_orders.append(n)

    # Per order, per context: sum of adjusted counts and gamma (the interpolation / backoff weight).
    gammas: list[dict[tuple[str, ...], float]] = []
    denominators: list[dict[tuple[str, ...], int]] = []
    for n in range(1, order + 1):
        d1, d2, d3 = discounts[n - 1]
        denominator: dict[tuple[str, ...], int] = {}
        n_by_count: dict[tuple[str, ...], list[int]] = {}
        for gram, count in adjusted[n - 1].items():
            context = gram[:-1]
            denominator[context] = denominator.get(context, 0) + count
            if count:
                bucket = n_by_count.setdefault(context, [0, 0, 0])
                bucket[min(count, 3) - 1] += 1
        gammas.append({c: (d1 * k[0] + d2 * k[1] + d3 * k[2]) / denominator[c] for c, k in n_by_count.items()})
        denominators.append(denominator)

    probs: list[dict[tuple[str, ...], float]] = []
    uniform = 1.0 / len(unigrams)  # the vocabulary: every word, </s> and <unk>; not <s>
    for n in range(1, order + 1):
        d = (0.0, *discounts[n - 1])
        gamma, denominator = gammas[n - 1], denominators[n - 1]
        lower = probs[n - 2] if n > 1 else None
        table: dict[tuple[str, ...], float] = {}
        for gram, count in adjusted[n - 1].items():
            context = gram[:-1]
            backed_off = uniform if lower is None else lower[gram[1:]]
            table[gram] = (count - d[min(count, 3)]) / denominator[context] + gamma[context] * backed_off
        probs.append(table)

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed, so a reader never loads a half-written model.
    partial = out.with_name(out.name + ".partial")
    counts = tuple(len(adjusted[n]) + (1 if n == 0 else 0) for n in range(order))
    with open(partial, "w", encoding="utf-8", newline="\n") as handle:
        handle.write("\\data\\\n")
        for n, count in enumerate(counts, start=1):
            handle.write(f"ngram {n}={count}\n")
        for n in range(1, order + 1):
            handle.write(f"\n\\{n}-grams:\n")
            table = probs[n - 1]
            contexts = gammas[n] if n < order else {}
            rows = list(table)
            if n == 1:
                rows.append((BOS,))
            # Sorted by the n-gram as written: code-point order of the line text, the same everywhere.
            rows.sort(key=" ".join)
            for gram in rows:
                prob = _BOS_LOG10_PROB if gram == (BOS,) else math.log10(table[gram])
                backoff = contexts.get(gram)
                if backoff is None:
                    handle.write(f"{_format(prob)}\t{' '.join(gram)}\n")
                else:
                    handle.write(f"{_format(prob)}\t{' '.join(gram)}\t{_format(math.log10(backoff))}\n")
        handle.write("\n\\end\\\n")
    os.replace(partial, out)
    return ArpaStats(
        order=order,
        ngram_counts=counts,
        discounts=tuple(discounts),
        fallback_orders=tuple(fallback_orders),
        n_sentences=n_sentences,
        n_words=n_words,
    )


def build_reference_lm(corpus_path: str | Path, out_path: str | Path, order: int = 3) -> ArpaStats:
    """Estimate the reference model from a .txt or .txt.xz corpus (e.g. data/corpus/) into an ARPA file."""
    return estimate_arpa(read_corpus_sentences(corpus_path), out_path, order=order)
