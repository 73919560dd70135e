"""A labelled near-duplicate set from real text, and the evaluation of MinHash-LSH on it.

Base documents are real: English Wikipedia articles (data/corpus, CC BY-SA) cut into chunks of whole
sentences (300-800 words), and news articles (ScrapingHub benchmark, MIT) whole. For some base documents, a
family of 15 variants is derived with a seeded RNG: 5/10/20/30/40% of the sentences deleted, or as many
sentences from other real documents inserted, or replacing them. The label of a pair is its exact Jaccard
similarity on the same 5-word shingle sets MinHash sees, computed for ALL pairs (pairs sharing no shingle
have similarity 0). Used by tests/dedup/test_minhash_quality.py and bench/dedup_quality.py.
"""

from __future__ import annotations

import json
import lzma
import math
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from assets.curated.models import REFERENCE_CORPUS as WIKIPEDIA
from assets.dedup.minhash import MinHashParams, band_hashes, estimated_jaccard, shingles, signature_of_shingles
from tests.dedup.reference import candidate_pairs, match_probability

REPO = Path(__file__).resolve().parents[2]
NEWS = (
    REPO / "tests" / "curated" / "data" / "quality" / "scrapinghub_articles.jsonl",
    REPO / "tests" / "dedup" / "data" / "scrapinghub_articles.jsonl",
)

EDIT_KINDS = ("delete", "insert", "replace")
EDIT_RATES = (0.05, 0.10, 0.20, 0.30, 0.40)
BUCKET_EDGES = tuple(k / 10 for k in range(11))

# A sentence ends at . ! or ? (optionally closed by a quote or bracket) followed by space and a capital,
# digit or opening quote: crude, but it only has to cut real text into realistic edit units.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”’)\]]*\s+(?=[\"“(\[]?[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    """Sentences of one paragraph (a paragraph without end punctuation is one sentence)."""
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


def wikipedia_articles() -> list[tuple[str, list[str]]]:
    """(title, paragraphs) of the 104 Wikipedia articles kept in data/corpus."""
    articles: list[tuple[str, list[str]]] = []
    title, paragraphs = "", []
    with lzma.open(WIKIPEDIA, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("<doc title="):
                title, paragraphs = line[len('<doc title="') : -2], []
            elif line == "</doc>":
                articles.append((title, paragraphs))
            elif line:
                paragraphs.append(line)
    return articles


def chunk_sentences(
    sentences: list[str], min_words: int = 300, max_words: int = 800, target_words: int = 500
) -> list[list[str]]:
    """Consecutive runs of whole sentences of about target_words words; runs outside [min, max] are dropped."""
    chunks, current, n = [], [], 0
    for s in sentences:
        current.append(s)
        n += len(s.split())
        if n >= target_words:
            chunks.append(current)
            current, n = [], 0
    if current:
        chunks.append(current)
    return [c for c in chunks if min_words <= sum(len(s.split()) for s in c) <= max_words]


@dataclass(frozen=True)
class BaseDoc:
    """A real document, as the list of its sentences."""

    source: str  # "wikipedia:<title>#<chunk>" or "news:<id>"
    sentences: tuple[str, ...]


def base_documents() -> list[BaseDoc]:
    """All base documents: Wikipedia chunks in article order, then the news articles (300-1200 words)."""
    docs = []
    for title, paragraphs in wikipedia_articles():
        sentences = [s for p in paragraphs for s in split_sentences(p)]
        for k, chunk in enumerate(chunk_sentences(sentences)):
            docs.append(BaseDoc(f"wikipedia:{title}#{k}", tuple(chunk)))
    for path in NEWS:
        with path.open(encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                n_words = len(rec["text"].split())
                if 300 <= n_words <= 1200:
                    sentences = [s for p in rec["text"].split("\n") for s in split_sentences(p)]
                    docs.append(BaseDoc(f"news:{rec['id'][:12]}", tuple(sentences)))
    return docs


def make_variant(sentences: list[str], kind: str, rate: float, donors: list[str], rng: random.Random) -> list[str]:
    """`sentences` with round(rate * n) (at least 1) sentences deleted, inserted from `donors`, or replaced."""
    out = list(sentences)
    k = max(1, round(rate * len(out)))
    if kind == "delete":
        drop = set(rng.sample(range(len(out)), min(k, len(out) - 1)))
        return [s for i, s in enumerate(out) if i not in drop]
    if kind == "insert":
        for _ in range(k):
            out.insert(rng.randrange(len(out) + 1), rng.choice(donors))
        return out
    if kind == "replace":
        for i in rng.sample(range(len(out)), min(k, len(out))):
            out[i] = rng.choice(donors)
        return out
    raise ValueError(f"unknown edit kind {kind!r}; expected one of {EDIT_KINDS}")


@dataclass
class LabelledSet:
    """Documents (base documents first, then variants) and what each one is."""

    texts: list[str]
    family: list[int]  # index of the base document a text derives from (itself for a base document)
    edit: list[str]  # "original", or e.g. "replace 20%"
    n_base: int
    n_families: int


def build_labelled_set(n_base: int | None = None, n_families: int = 50, seed: int = 0) -> LabelledSet:
    """n_base base documents (spread evenly over all of them; None = all) and variant families for
    n_families of them, drawn with `seed`. Donor sentences (>= 8 words) come from the other base documents."""
    rng = random.Random(seed)
    everything = base_documents()
    if n_base is not None and n_base < len(everything):
        step = len(everything) / n_base
        everything = [everything[int(k * step)] for k in range(n_base)]
    docs = everything
    texts = [" ".join(d.sentences) for d in docs]
    family = list(range(len(docs)))
    edit = ["original"] * len(docs)
    heads = sorted(rng.sample(range(len(docs)), min(n_families, len(docs))))
    for h in heads:
        donors = [s for j, d in enumerate(docs) if j != h for s in d.sentences if len(s.split()) >= 8]
        for kind in EDIT_KINDS:
            for rate in EDIT_RATES:
                variant = make_variant(list(docs[h].sentences), kind, rate, donors, rng)
                texts.append(" ".join(variant))
                family.append(h)
                edit.append(f"{kind} {round(rate * 100)}%")
    return LabelledSet(texts, family, edit, len(docs), len(heads))


def shared_shingle_counts(shingle_sets: list[set[bytes]]) -> Counter:
    """|A & B| for every pair (i, j), i < j, of documents sharing at least one shingle."""
    postings: dict[bytes, list[int]] = defaultdict(list)
    for doc, sh in enumerate(shingle_sets):
        for s in sh:
            postings[s].append(doc)
    # Shingles of one kept sentence share one posting list: count each distinct list once, with its multiplicity.
    lists = Counter(tuple(p) for p in postings.values() if len(p) > 1)
    inter: Counter = Counter()
    for members, count in lists.items():
        for a, i in enumerate(members):
            for j in members[a + 1 :]:
                inter[(i, j)] += count
    return inter


def exact_jaccard_all_pairs(shingle_sets: list[set[bytes]]) -> dict[tuple[int, int], float]:
    """Exact Jaccard similarity of every pair with a non-zero one (all other pairs have 0)."""
    sizes = [len(s) for s in shingle_sets]
    return {(i, j): c / (sizes[i] + sizes[j] - c) for (i, j), c in shared_shingle_counts(shingle_sets).items()}


@lru_cache(maxsize=100_000)
def ideal_prediction_probability(s: float, verify: float, bands: int, rows: int) -> float:
    """P(a pair of Jaccard s shares a band AND at least verify*bands*rows rows are equal) for an ideal MinHash,
    whose rows match independently with probability s. Exact, by dynamic programming over the bands."""
    per_band = np.array([math.comb(rows, k) * s**k * (1 - s) ** (rows - k) for k in range(rows + 1)])
    size = bands * rows + 1
    no_full = np.zeros(size)  # P(m equal rows so far, no band fully equal), indexed by m
    no_full[0] = 1.0
    full = np.zeros(size)  # P(m equal rows so far, some band fully equal)
    for _ in range(bands):
        full = np.convolve(full, per_band)[:size]
        full[rows:] += no_full[: size - rows] * per_band[rows]
        no_full = np.convolve(no_full, per_band[:rows])[:size]
    need = math.ceil(verify * bands * rows - 1e-9)
    return float(full[need:].sum())


@dataclass
class BucketRow:
    """Pairs whose exact Jaccard similarity falls in [lo, hi), and how many of them LSH made candidates."""

    lo: float
    hi: float
    n_pairs: int = 0
    n_candidates: int = 0
    expected_candidates: float = 0.0  # sum over the pairs of 1-(1-s^r)^b at each pair's own similarity
    variance: float = 0.0  # sum of p(1-p): the binomial variance of n_candidates if pairs were independent

    @property
    def measured(self) -> float:
        return self.n_candidates / self.n_pairs if self.n_pairs else float("nan")

    @property
    def expected(self) -> float:
        return self.expected_candidates / self.n_pairs if self.n_pairs else float("nan")


@dataclass
class Quality:
    """Precision and recall of LSH + verification against exact Jaccard labels, and the LSH S-curve check."""

    params: MinHashParams
    dup_threshold: float
    grey: float
    n_docs: int
    n_pairs: int
    n_true: int
    n_candidates: int
    by_verify: dict[float, dict[str, float]] = field(default_factory=dict)  # verify threshold -> tp/fp/fn/p/r
    lsh_recall: float = 0.0  # true duplicates that became candidates at all (the ceiling for verification)
    buckets: list[BucketRow] = field(default_factory=list)
    estimate_abs_error: float = 0.0  # mean |estimated - exact| over candidate pairs
    estimate_expected_sd: float = 0.0  # mean sqrt(s(1-s)/num_perm) over the same pairs
    exact_verify: dict[str, float] = field(default_factory=dict)  # candidates verified by exact Jaccard


def evaluate(
    data: LabelledSet,
    params: MinHashParams = MinHashParams(),
    dup_threshold: float = 0.8,
    verify_thresholds: tuple[float, ...] = (0.8, 0.75),
    grey: float = 0.05,
) -> Quality:
    """Signatures, band hashes and LSH candidates for every text, scored against exact Jaccard labels."""
    shingle_sets = [set(shingles(t, params.n_grams)) for t in data.texts]
    sigs = [signature_of_shingles(s, params) for s in shingle_sets]  # a set gives the same minima as the list
    cands = candidate_pairs([band_hashes(s, params) for s in sigs])
    exact = exact_jaccard_all_pairs(shingle_sets)
    n = len(data.texts)
    n_pairs = n * (n - 1) // 2
    true = {p for p, s in exact.items() if s >= dup_threshold}
    estimate = {p: estimated_jaccard(sigs[p[0]], sigs[p[1]]) for p in cands}

    q = Quality(params, dup_threshold, grey, n, n_pairs, len(true), len(cands))
    q.lsh_recall = len(true & cands) / len(true) if true else float("nan")
    for v in verify_thresholds:
        pred = {p for p, e in estimate.items() if e >= v}
        tp, fp, fn = len(pred & true), len(pred - true), len(true - pred)
        q.by_verify[v] = {
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "precision": tp / (tp + fp) if tp + fp else float("nan"),
            "recall": tp / (tp + fn) if tp + fn else float("nan"),
            # false positives that are near misses (exact >= 0.7): what a lower verify threshold costs
            "fp_near_miss": sum(1 for p in pred - true if exact.get(p, 0.0) >= 0.7),
        }
        # What an ideal MinHash would score on the same pairs (pairs below 0.3 contribute < 1e-4 each).
        probs = {
            p: ideal_prediction_probability(round(s, 3), v, params.bands, params.rows)
            for p, s in exact.items()
            if s >= 0.3
        }
        e_tp = sum(pr for p, pr in probs.items() if p in true)
        e_fp = sum(pr for p, pr in probs.items() if p not in true)
        q.by_verify[v]["ideal_precision"] = e_tp / (e_tp + e_fp) if e_tp + e_fp else float("nan")
        q.by_verify[v]["ideal_recall"] = e_tp / len(true) if true else float("nan")
        # The same targets outside a grey zone of +-grey around the threshold, where a 112-row estimate
        # (sd 0.038 at s = 0.8) cannot tell the sides apart: a false positive counts only below
        # threshold - grey, a miss only at or above threshold + grey.
        lo, hi = dup_threshold - grey, dup_threshold + grey
        clear_true = {p for p in true if exact[p] >= hi}
        q.by_verify[v]["precision_outside_grey"] = (
            sum(1 for p in pred if exact.get(p, 0.0) >= lo) / len(pred) if pred else float("nan")
        )
        q.by_verify[v]["recall_outside_grey"] = len(pred & clear_true) / len(clear_true) if clear_true else float("nan")

    # Verification by the exact Jaccard of the candidate pair's shingles (the asset's default, verify="exact"):
    # precision is 1 by construction, so the number that matters is recall, i.e. the LSH stage's recall.
    pred = {p for p in cands if exact.get(p, 0.0) >= dup_threshold}
    tp, fp = len(pred & true), len(pred - true)
    q.exact_verify = {
        "tp": tp,
        "fp": fp,
        "fn": len(true - pred),
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / len(true) if true else float("nan"),
    }

    rows = [BucketRow(lo, hi) for lo, hi in zip(BUCKET_EDGES, BUCKET_EDGES[1:])]
    for p, s in exact.items():
        row = rows[min(int(s * 10), 9)]
        prob = match_probability(s, params.bands, params.rows)
        row.n_pairs += 1
        row.n_candidates += p in cands
        row.expected_candidates += prob
        row.variance += prob * (1 - prob)
    rows[0].n_pairs += n_pairs - len(exact)  # pairs sharing no shingle: similarity 0, match probability 0
    rows[0].n_candidates += sum(1 for p in cands if p not in exact)
    q.buckets = rows

    if cands:
        errs = [abs(estimate[p] - exact.get(p, 0.0)) for p in cands]
        sds = [np.sqrt(exact.get(p, 0.0) * (1 - exact.get(p, 0.0)) / params.num_perm) for p in cands]
        q.estimate_abs_error = float(np.mean(errs))
        q.estimate_expected_sd = float(np.mean(sds))
    return q


def format_report(q: Quality) -> str:
    """The quality report as text: precision/recall per verification threshold and the S-curve table."""
    p = q.params
    lines = [
        f"MinHash-LSH {p.bands} bands x {p.rows} rows ({p.num_perm} perms), {p.n_grams}-word shingles, seed {p.seed}",
        f"documents {q.n_docs:,}, pairs {q.n_pairs:,}, true duplicates (exact Jaccard >= {q.dup_threshold}) "
        f"{q.n_true:,}, LSH candidates {q.n_candidates:,}",
        f"LSH recall (true duplicates sharing a band): {q.lsh_recall:.4f}",
        f"estimated Jaccard on candidates: mean |error| {q.estimate_abs_error:.4f} "
        f"(binomial sd sqrt(s(1-s)/{p.num_perm}) averages {q.estimate_expected_sd:.4f})",
        "",
        f"LSH candidates verified by estimated Jaccard >= v (strict labels: exact >= {q.dup_threshold}); "
        f"'ideal' = an ideal {p.num_perm}-row MinHash on the same pairs;",
        f"'outside grey' = FP only if exact < {q.dup_threshold - q.grey:.2f}, "
        f"miss only if exact >= {q.dup_threshold + q.grey:.2f}",
        "  v      precision  recall |  ideal P  ideal R |  P outside grey  R outside grey |    tp    fp    fn  fp>=0.7",
    ]
    for v, m in q.by_verify.items():
        lines.append(
            f"  {v:<6} {m['precision']:>9.4f} {m['recall']:>7.4f} | {m['ideal_precision']:>8.4f}"
            f" {m['ideal_recall']:>8.4f} | {m['precision_outside_grey']:>15.4f} {m['recall_outside_grey']:>15.4f} |"
            f" {m['tp']:>5} {m['fp']:>5} {m['fn']:>5} {m['fp_near_miss']:>8}"
        )
    m = q.exact_verify
    lines += [
        f"  exact  {m['precision']:>9.4f} {m['recall']:>7.4f}   <- candidates verified by the exact Jaccard of their "
        f"shingles (the asset's default; precision is 1 by construction, recall = LSH recall)",
        "",
        "exact Jaccard     pairs   candidates  measured  expected(per pair)  1-(1-s^r)^b at midpoint",
    ]
    for r in q.buckets:
        mid = match_probability((r.lo + r.hi) / 2, p.bands, p.rows)
        close = "]" if r.hi == 1.0 else ")"
        lines.append(
            f"  [{r.lo:.1f}, {r.hi:.1f}{close} {r.n_pairs:>10,} {r.n_candidates:>10,} {r.measured:>9.4f}"
            f" {r.expected:>19.4f} {mid:>24.4f}"
        )
    return "\n".join(lines)
