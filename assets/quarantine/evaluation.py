"""The semantic quarantine's evaluation set (data/benchmarks/paraphrases/reworded.jsonl, README.md there):
items reworded so that they share few of their content words, topical negatives, and the seeded split into a
calibration half (what the method is fitted and its thresholds chosen on) and a test half (reported once,
after the method was frozen). Pure functions; no Dagster."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

from assets.quarantine.benchmarks import BENCHMARKS_DIR, BenchmarkSource, EvalItem, load_items
from assets.quarantine.ngrams import normalise_words

REWORDED = BENCHMARKS_DIR / "paraphrases" / "reworded.jsonl"
EXTRA_DIR = BENCHMARKS_DIR / "extra"
# the two formats written for this set (README.md there): short QA and sentence completion, registered the way
# `tokenlake benchmark add` registers a user's file (fields joined with "\n", row numbers as ids)
EXTRA_SOURCES = (
    BenchmarkSource("trivia_qa_tl", EXTRA_DIR / "trivia_qa_tl.jsonl", "jsonl", fields=("question", "answer")),
    BenchmarkSource("completion_tl", EXTRA_DIR / "completion_tl.jsonl", "jsonl", fields=("context", "ending")),
)
SPLIT_SEED = 40
MAX_CONTENT_SHARE = 0.40
STYLES = ("reordered", "synonyms", "passive_active", "question_statement", "answer_embedded")

# English function words: what a reworded sentence may keep without keeping the item's content
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves""".split()
)


def content_words(text: str) -> set[str]:
    """The text's distinct normalised words that are not English function words."""
    return {w for w in normalise_words(text).words if w not in STOPWORDS}


def content_share(original: str, paraphrase: str) -> float:
    """Share of the original's distinct content words that the paraphrase also has (rounded to 3 decimals)."""
    words = content_words(original)
    return round(len(words & content_words(paraphrase)) / len(words), 3) if words else 0.0


def split_of(item_ids: Sequence[str], seed: int = SPLIT_SEED) -> dict[str, str]:
    """`calibration` or `test` per item: within each benchmark (the id's first part), the ids in sorted order
    shuffled by `random.Random(seed)`, the first half (rounded up) calibration."""
    by_benchmark: dict[str, list[str]] = {}
    for i in sorted(item_ids):
        by_benchmark.setdefault(i.split("/")[0], []).append(i)
    rng = random.Random(seed)
    out = {}
    for _, ids in sorted(by_benchmark.items()):
        rng.shuffle(ids)
        half = (len(ids) + 1) // 2
        out |= {i: "calibration" if k < half else "test" for k, i in enumerate(ids)}
    return out


def extra_items() -> list[EvalItem]:
    """The items of the two formats written for the evaluation set."""
    return load_items(EXTRA_SOURCES)


def load_reworded(path: Path = REWORDED) -> list[dict]:
    """Rows of the evaluation set: item_id, benchmark, style, split, original, paraphrase, content_share,
    negative (a topical negative: same subject, a different fact)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
