"""Real documents with real evaluation items injected into them, for measuring decontamination recall.

Documents (all real, shipped in the repo): the 104 English Wikipedia articles of data/corpus cut into runs of
whole paragraphs of up to ~2,500 characters (CC BY-SA), and the ScrapingHub news articles and navigation text
kept under tests/curated/data/quality/ and tests/dedup/data/ (MIT). Items: the shipped benchmarks
(GSM8K, HumanEval, MMLU-Redux).

Three kinds of injection, each with a seeded RNG, one injection per copy of a host document, inserted at a
whitespace position of the host:
- "verbatim": the item's whole text;
- "fragment": 13 to 40 consecutive (normalised) words of the item, cut from its original text by their
  character spans (items of fewer than 13 words have no such fragment and are not drawn);
- "edited": the whole item with case changed (lower, upper or some words capitalised), punctuation at word
  ends dropped or changed (never between two letters, which would merge words), whitespace collapsed or
  doubled, and one or two words replaced by a different word taken from the host document.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from assets.curated.models import REFERENCE_CORPUS as WIKIPEDIA
from assets.quarantine.benchmarks import EvalItem
from assets.quarantine.ngrams import normalise_words
from assets.quarantine.semantic import reference_runs

REPO = Path(__file__).resolve().parents[2]
JSONL_DOCS = (
    REPO / "tests" / "curated" / "data" / "quality" / "scrapinghub_articles.jsonl",
    REPO / "tests" / "curated" / "data" / "quality" / "scrapinghub_navigation.jsonl",
    REPO / "tests" / "dedup" / "data" / "scrapinghub_articles.jsonl",
)
KINDS = ("verbatim", "fragment", "edited")
FRAGMENT_WORDS = (13, 40)


@dataclass(frozen=True)
class Injection:
    """A host document with one item's text (or a fragment / edit of it) at [char_start, char_end)."""

    kind: str
    item_index: int
    host_index: int
    text: str
    char_start: int
    char_end: int


def real_documents(max_chars: int = 2500) -> list[str]:
    """The untouched real documents: Wikipedia paragraph runs of up to `max_chars`, then the news texts."""
    docs = reference_runs(WIKIPEDIA, max_chars)
    for path in JSONL_DOCS:
        with open(path, encoding="utf-8") as f:
            docs.extend(json.loads(line)["text"] for line in f if line.strip())
    return docs


def _insert(host: str, piece: str, rng: random.Random) -> tuple[str, int, int]:
    spaces = [m.start() for m in re.finditer(r"\s", host)] or [len(host)]
    at = rng.choice(spaces)
    text = host[:at] + " " + piece + " " + host[at:]
    return text, at + 1, at + 1 + len(piece)


def fragment(item_text: str, rng: random.Random) -> str | None:
    """13-40 consecutive words of the item, as they appear in its text; None if it has fewer than 13."""
    norm = normalise_words(item_text)
    if len(norm) < FRAGMENT_WORDS[0]:
        return None
    k = rng.randint(FRAGMENT_WORDS[0], min(FRAGMENT_WORDS[1], len(norm)))
    j = rng.randint(0, len(norm) - k)
    return item_text[norm.starts[j] : norm.ends[j + k - 1]]


_END_PUNCT = re.compile(r"(?<=\w)[.,;:!?]+(?=\s|$)")


def light_edit(item_text: str, rng: random.Random, vocabulary: list[str]) -> tuple[str, int]:
    """The item with case, punctuation and whitespace changed and 1-2 words substituted; returns
    (edited text, number of words substituted)."""
    norm = normalise_words(item_text)
    n_subs = min(rng.choice((1, 2)), len(norm))
    positions = sorted(rng.sample(range(len(norm)), n_subs), reverse=True)
    text = item_text
    for p in positions:  # right to left, so earlier spans stay valid
        word = norm.words[p]
        replacement = rng.choice([w for w in vocabulary if w.lower() != word] or ["zebra"])
        text = text[: norm.starts[p]] + replacement + text[norm.ends[p] :]

    case = rng.choice(("lower", "upper", "capitalise"))
    if case == "lower":
        text = text.lower()
    elif case == "upper":
        text = text.upper()
    else:
        text = re.sub(r"\b[a-z]", lambda m: m.group().upper() if rng.random() < 0.5 else m.group(), text)

    text = _END_PUNCT.sub(lambda m: rng.choice(("", "", ",", " .", "!")), text)
    text = text.replace("\u2019", "'")
    if rng.random() < 0.5:
        text = re.sub(r"\s+", " ", text).strip()
    else:
        text = re.sub(r" ", lambda m: rng.choice((" ", " ", "  ", "\n")), text)
    return text, n_subs


def build_injections(
    items: list[EvalItem], docs: list[str], per_kind_per_benchmark: int = 100, seed: int = 13
) -> list[Injection]:
    """`per_kind_per_benchmark` injections of each kind for each benchmark, into randomly chosen host documents."""
    rng = random.Random(seed)
    by_benchmark: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_benchmark.setdefault(item.benchmark, []).append(i)
    injections = []
    for kind in KINDS:
        for benchmark in sorted(by_benchmark):
            pool = by_benchmark[benchmark]
            if kind == "fragment":
                pool = [i for i in pool if len(normalise_words(items[i].text)) >= FRAGMENT_WORDS[0]]
            for item_index in rng.sample(pool, min(per_kind_per_benchmark, len(pool))):
                host_index = rng.randrange(len(docs))
                host = docs[host_index]
                if kind == "verbatim":
                    piece = items[item_index].text
                elif kind == "fragment":
                    piece = fragment(items[item_index].text, rng)
                else:
                    vocabulary = [w for w in re.findall(r"[A-Za-z]{3,}", host)][:500]
                    piece, _ = light_edit(items[item_index].text, rng, vocabulary)
                text, start, end = _insert(host, piece, rng)
                injections.append(Injection(kind, item_index, host_index, text, start, end))
    return injections
