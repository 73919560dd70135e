"""Semantic matches: evaluation items paraphrased in a document, found by static-embedding neighbours of
document windows (README.md, "Semantic matches"). Pure functions and one index class; no Dagster.

Windows: runs of `window_words` normalised words every `stride_words` words, cut from the original text by
the words' character spans. Each window and each item is embedded with `assets.embeddings.embed` (wordllama,
L2-normalised), and a window's score for an item is its cosine similarity minus the item's background level:
the mean of the item's `background_k` highest similarities to windows of reference text that contains no
benchmark (the Wikipedia excerpt shipped in data/corpus, even paragraph runs, and screened web pages in
data/quarantine_background). Raw cosine measures topic: a
short MMLU question about the Supreme Court is as close to a Wikipedia paragraph on the court as to its own
paraphrase. Subtracting what the item already scores against clean text on its topic leaves what is specific
to the item (tests/quarantine/test_semantic.py, bench/semantic_quarantine.py).

A window whose score reaches the item's margin is only a candidate; it is confirmed by a second, lexical
signal: the share of the item's distinct words, weighted by their rarity in the same clean text (inverse
document frequency), that occur in the window or the `context_words` words either side of it. A paraphrase
keeps the item's numbers, names, answer options and identifiers; a clean text on the same topic (a news
story about cars and HumanEval's car race) shares its meaning but few of its rare words.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from assets.quarantine.ngrams import Match, NormalisedText, normalise_words

# chosen on the calibration half by bench/semantic_quarantine.py (README.md): one per shipped benchmark (their
# items score differently against clean text: code never looks like prose), and DEFAULT_THRESHOLD /
# DEFAULT_LEXICAL, the strictest margin and share of the three, for benchmarks registered later (kind
# unknown). The margin (candidate stage) lets through at most CANDIDATE_FP of the calibration clean documents;
# the lexical share (confirmation stage) is the lowest at which the candidates then flag at most the budget.
DEFAULT_THRESHOLD = 0.22
BENCHMARK_THRESHOLDS = {"gsm8k": 0.17, "mmlu_redux": 0.22, "humaneval": -0.01}
DEFAULT_LEXICAL = 0.51
BENCHMARK_LEXICAL = {"gsm8k": 0.32, "mmlu_redux": 0.51, "humaneval": 0.22}
CANDIDATE_FP = 0.05
DEFAULT_CONTEXT_WORDS = 32  # words either side of a candidate window that its lexical share also counts
DEFAULT_WINDOW_WORDS = 32
DEFAULT_STRIDE_WORDS = 8
DEFAULT_MIN_WORDS = 16  # shorter documents (and items) embed too few words to say what they are about
DEFAULT_BACKGROUND_K = 5
DEFAULT_BACKGROUND_STRIDE = 16
SCORE_DECIMALS = 4
DEFAULT_BATCH_WINDOWS = 2048  # windows embedded and scored at once: bounds memory to batch x items floats
DEFAULT_CACHE_WINDOWS = 131072  # window embeddings kept per process (about 160 MB), see WindowCache

REFERENCE_TEXT = Path(__file__).resolve().parents[2] / "data" / "corpus" / "enwiki_excerpt_clean_104articles.txt.xz"
WEB_TEXT = Path(__file__).resolve().parents[2] / "data" / "quarantine_background" / "web_text.jsonl.xz"

Embed = Callable[[list[str]], np.ndarray]


def _default_embed(texts: list[str]) -> np.ndarray:
    from assets.embeddings import embed  # loads wordllama on first use only

    return embed(texts)


@dataclass(frozen=True)
class Window:
    """A run of a document's words: which document, first and last word, and its character span."""

    doc: int
    first: int
    last: int
    char_start: int
    char_end: int


def window_starts(n_words: int, size: int, stride: int, min_words: int) -> list[int]:
    """First word of each window of a text of `n_words` words: every `stride` words, the last one flush with the
    end; one window of the whole text when it is shorter than `size`; none below `min_words`."""
    if size < 1 or stride < 1:
        raise ValueError(f"window size and stride must be >= 1 words, got size={size}, stride={stride}")
    if n_words < min_words or n_words == 0:
        return []
    last = max(0, n_words - size)
    starts = list(range(0, last + 1, stride))
    if starts[-1] != last:
        starts.append(last)
    return starts


def windows(
    norm: NormalisedText,
    doc: int = 0,
    size: int = DEFAULT_WINDOW_WORDS,
    stride: int = DEFAULT_STRIDE_WORDS,
    min_words: int = DEFAULT_MIN_WORDS,
) -> list[Window]:
    """The document's windows (`norm` from `normalise_words`), in order."""
    out = []
    for s in window_starts(len(norm), size, stride, min_words):
        e = min(len(norm), s + size) - 1
        out.append(Window(doc, s, e, int(norm.starts[s]), int(norm.ends[e])))
    return out


def embed_batched(texts: Sequence[str], embed: Embed, batch: int = DEFAULT_BATCH_WINDOWS) -> np.ndarray:
    """Embeddings of `texts`, `batch` at a time (float32, one row per text)."""
    parts = [np.asarray(embed(list(texts[i : i + batch])), dtype=np.float32) for i in range(0, len(texts), batch)]
    return np.concatenate(parts) if parts else np.zeros((0, 0), dtype=np.float32)


def top_k_mean(queries: np.ndarray, keys: np.ndarray, k: int, block: int = 1024) -> np.ndarray:
    """For each query row, the mean of its `k` highest dot products with the key rows (blocked over queries)."""
    if len(keys) == 0:
        return np.zeros(len(queries), dtype=np.float32)
    k = min(k, len(keys))
    out = np.empty(len(queries), dtype=np.float32)
    for b in range(0, len(queries), block):
        sims = queries[b : b + block] @ keys.T
        out[b : b + block] = -np.partition(-sims, k - 1, axis=1)[:, :k].mean(axis=1)
    return out


def reference_runs(path: Path = REFERENCE_TEXT, max_chars: int = 2500) -> list[str]:
    """The reference text (Wikipedia excerpt, one `<doc>` per article) cut into runs of whole paragraphs of up to
    `max_chars` characters, in file order."""
    if not path.is_file():
        raise FileNotFoundError(f"semantic quarantine: reference text {path} is missing; it ships in data/corpus")
    runs: list[str] = []
    current: list[str] = []
    with lzma.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("<doc") or line == "</doc>":
                if current:
                    runs.append("\n".join(current))
                current = []
            elif line:
                if current and sum(len(p) for p in current) + len(line) > max_chars:
                    runs.append("\n".join(current))
                    current = []
                current.append(line)
    return runs


def threshold_for(benchmark: str, default: float = DEFAULT_THRESHOLD) -> float:
    """The margin measured for `benchmark` (BENCHMARK_THRESHOLDS), else `default`."""
    return BENCHMARK_THRESHOLDS.get(benchmark, default)


def lexical_for(benchmark: str, default: float = DEFAULT_LEXICAL) -> float:
    """The lexical share measured for `benchmark` (BENCHMARK_LEXICAL), else `default`."""
    return BENCHMARK_LEXICAL.get(benchmark, default)


def inverse_document_frequency(texts: Sequence[str]) -> dict[str, float]:
    """log((N + 1) / (df + 1)) of every normalised word of `texts` (N texts, df: texts that contain the word);
    a word absent from them weighs log(N + 1) (`word_weight`)."""
    df: dict[str, int] = {}
    for t in texts:
        for w in set(normalise_words(t).words):
            df[w] = df.get(w, 0) + 1
    n = len(texts)
    return {w: math.log((n + 1) / (c + 1)) for w, c in df.items()}


def word_weight(idf: dict[str, float], n_texts: int, word: str) -> float:
    """A word's rarity weight: its inverse document frequency, log(n_texts + 1) when no text has it."""
    return idf.get(word, math.log(n_texts + 1))


def lexical_share(item_weights: dict[str, float], words: set[str], total: float | None = None) -> float:
    """Share of the item's distinct words, by weight, that occur in `words` (0.0 for an item without words);
    `total`: the sum of `item_weights` when the caller already has it."""
    total = sum(item_weights.values()) if total is None else total
    return sum(v for w, v in item_weights.items() if w in words) / total if total > 0 else 0.0


def web_texts(path: Path = WEB_TEXT) -> list[str]:
    """Web pages (news articles, blogs, shops, documentation) that contain no benchmark item
    (data/quarantine_background/README.md), in file order."""
    if not path.is_file():
        raise FileNotFoundError(f"semantic quarantine: web background {path} is missing; it ships in data/")
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()]


def background_texts() -> list[str]:
    """Clean text the items' background levels and word weights are measured on: the even reference runs and
    the even web pages (news with quantities, navigation, shops, programming: genres Wikipedia alone does not
    cover); the odd ones are kept apart for choosing thresholds and measuring false positives."""
    return reference_runs()[0::2] + web_texts()[0::2]


def window_texts(texts: Sequence[str], size: int, stride: int, min_words: int) -> list[str]:
    """Every window of every text, as the text it covers."""
    out = []
    for t in texts:
        out += [t[w.char_start : w.char_end] for w in windows(normalise_words(t), 0, size, stride, min_words)]
    return out


@lru_cache(maxsize=2)
def default_background(window_words: int, stride_words: int, min_words: int) -> np.ndarray:
    """Embeddings of the windows of `background_texts()` (computed once per process: every benchmark's index
    measures its items against the same clean windows)."""
    emb = embed_batched(window_texts(background_texts(), window_words, stride_words, min_words), _default_embed)
    emb.setflags(write=False)
    return emb


@lru_cache(maxsize=1)
def default_idf() -> tuple[dict[str, float], int]:
    """Inverse document frequencies of `background_texts()` and their number (computed once per process)."""
    texts = background_texts()
    return inverse_document_frequency(texts), len(texts)


@dataclass(frozen=True)
class Candidate:
    """A window whose score reaches its item's margin, with the window's lexical share of the item."""

    doc: int
    item: int
    score: float  # rounded to SCORE_DECIMALS
    lexical: float  # rounded to SCORE_DECIMALS
    window: Window


class WindowCache:
    """Embeddings of recently embedded window texts, by a 16-byte hash of the text, least recently used out
    first beyond `max_windows`. A process that screens one segment against several benchmarks (one index
    each) embeds each window once instead of once per benchmark; an embedding depends only on its text, and
    scores are rounded before any comparison, so matches are the same with or without it."""

    def __init__(self, max_windows: int = DEFAULT_CACHE_WINDOWS):
        if max_windows < 0:
            raise ValueError(f"window cache size must be >= 0 windows, got {max_windows}")
        self.max_windows = max_windows
        self._vectors: OrderedDict[bytes, np.ndarray] = OrderedDict()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._vectors)

    def embed(self, texts: Sequence[str], embed: Embed) -> np.ndarray:
        """Embeddings of `texts` (float32, one row each): cached rows, the others from `embed` in one call."""
        keys = [hashlib.blake2b(t.encode("utf-8"), digest_size=16).digest() for t in texts]
        rows: list[np.ndarray | None] = [self._vectors.get(k) for k in keys]
        for k, r in zip(keys, rows):
            if r is not None:
                self._vectors.move_to_end(k)
        todo = {keys[i]: texts[i] for i, r in enumerate(rows) if r is None}
        self.hits += len(texts) - sum(r is None for r in rows)
        self.misses += len(todo)
        if todo:
            new = np.asarray(embed(list(todo.values())), dtype=np.float32)
            fresh = dict(zip(todo, new))
            rows = [fresh[k] if r is None else r for k, r in zip(keys, rows)]
            for k, v in fresh.items():
                self._vectors[k] = v
            while len(self._vectors) > self.max_windows:
                self._vectors.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


WINDOW_CACHE = WindowCache()  # shared by the indexes that embed with the default model (one per benchmark)


class SemanticIndex:
    """Item embeddings and their background levels; `find_batch` scores document windows against them."""

    def __init__(
        self,
        embeddings: np.ndarray,
        background: np.ndarray,
        matchable: np.ndarray,
        *,
        threshold: float | np.ndarray,
        lexical: float | np.ndarray = DEFAULT_LEXICAL,
        item_weights: Sequence[dict[str, float]] = (),
        context_words: int = DEFAULT_CONTEXT_WORDS,
        window_words: int,
        stride_words: int,
        min_words: int,
        batch_windows: int,
        embed: Embed,
    ):
        self.embeddings = embeddings  # float32 (items x dim), L2-normalised
        self.background = background  # float32 per item: mean of its top-k similarities to clean windows
        self.matchable = matchable  # bool per item: long enough to be matched semantically
        # per item (a float applies to every item); a score is compared after rounding to SCORE_DECIMALS
        self.threshold = np.broadcast_to(np.asarray(threshold, dtype=np.float64), matchable.shape).copy()
        # per item: the confirmation stage's lowest lexical share (rounded like scores)
        self.lexical = np.broadcast_to(np.asarray(lexical, dtype=np.float64), matchable.shape).copy()
        self.item_weights = list(item_weights)  # per item: its distinct words' rarity weights
        self.item_totals = [sum(w.values()) for w in self.item_weights]  # lexical_share's denominators
        self.context_words = context_words
        self.window_words = window_words
        self.stride_words = stride_words
        self.min_words = min_words
        self.batch_windows = batch_windows
        self.embed = embed
        # only the default model's embeddings are shared: another `embed` (tests) gets its own vectors
        self.cache: WindowCache | None = WINDOW_CACHE if embed is _default_embed else None

    @classmethod
    def build(
        cls,
        items: Sequence[str | object],
        *,
        threshold: float | Sequence[float] = DEFAULT_THRESHOLD,
        lexical: float | Sequence[float] = DEFAULT_LEXICAL,
        context_words: int = DEFAULT_CONTEXT_WORDS,
        window_words: int = DEFAULT_WINDOW_WORDS,
        stride_words: int = DEFAULT_STRIDE_WORDS,
        min_words: int = DEFAULT_MIN_WORDS,
        background: Sequence[str] | None = None,
        background_k: int = DEFAULT_BACKGROUND_K,
        background_stride: int = DEFAULT_BACKGROUND_STRIDE,
        batch_windows: int = DEFAULT_BATCH_WINDOWS,
        embed: Embed | None = None,
    ) -> SemanticIndex:
        """Embed items (`EvalItem`s or texts; item_index = position) and measure each one's background level on
        the windows of `background` (default: `background_texts()`), and weigh each item's words by their
        rarity in that text. `threshold` (the candidate margin) and `lexical` (the confirmation's lowest
        lexical share): one for all items, or one per item."""
        bad = [t for t in np.atleast_1d(np.asarray(threshold, dtype=np.float64)).tolist() if not -1.0 < t < 2.0]
        if bad:
            raise ValueError(f"semantic threshold is a cosine margin in (-1, 2), got {bad[0]}")
        bad = [t for t in np.atleast_1d(np.asarray(lexical, dtype=np.float64)).tolist() if not 0.0 <= t <= 1.0]
        if bad:
            raise ValueError(f"semantic lexical threshold is a share of the item's word weight in [0, 1], got {bad[0]}")
        if context_words < 0:
            raise ValueError(f"semantic context_words must be >= 0 words, got {context_words}")
        embed = embed or _default_embed
        texts = [i if isinstance(i, str) else i.text for i in items]
        matchable = np.array([len(normalise_words(t)) >= min_words for t in texts], dtype=bool)
        if background is None:
            idf, n_texts = default_idf()
        else:
            idf, n_texts = inverse_document_frequency(background), len(background)
        # words in sorted order: a share's float sum then adds in the same order in every process (a set's order
        # depends on the process's string hash seed)
        item_weights = [{w: word_weight(idf, n_texts, w) for w in sorted(set(normalise_words(t).words))} for t in texts]
        emb = embed_batched(texts, embed, batch_windows)
        if background is None and embed is _default_embed:
            bg = default_background(window_words, background_stride, min_words)
        else:
            bg_windows = window_texts(
                background_texts() if background is None else background, window_words, background_stride, min_words
            )
            bg = embed_batched(bg_windows, embed, batch_windows)
        return cls(
            emb,
            top_k_mean(emb, bg, background_k) if len(emb) else np.zeros(0, dtype=np.float32),
            matchable,
            threshold=threshold,
            lexical=lexical,
            item_weights=item_weights,
            context_words=context_words,
            window_words=window_words,
            stride_words=stride_words,
            min_words=min_words,
            batch_windows=batch_windows,
            embed=embed,
        )

    @property
    def nbytes(self) -> int:
        """Memory held by the index arrays, in bytes."""
        return self.embeddings.nbytes + self.background.nbytes + self.matchable.nbytes

    def scores(self, window_embeddings: np.ndarray) -> np.ndarray:
        """(windows x items) scores: cosine similarity minus the item's background level."""
        return window_embeddings @ self.embeddings.T - self.background[None, :]

    def doc_item_max(self, texts: Sequence[str]) -> np.ndarray:
        """(texts x items) best window score of each item in each text (-inf without windows); for measuring
        thresholds, not for screening (it holds a float per text and item)."""
        out = np.full((len(texts), len(self.embeddings)), -np.inf, dtype=np.float32)
        wins: list[Window] = []
        for d, t in enumerate(texts):
            wins += windows(normalise_words(t), d, self.window_words, self.stride_words, self.min_words)
        for b in range(0, len(wins), self.batch_windows):
            block = wins[b : b + self.batch_windows]
            s = self.scores(self.embed([texts[w.doc][w.char_start : w.char_end] for w in block]))
            s[:, ~self.matchable] = -np.inf
            np.maximum.at(out, np.array([w.doc for w in block]), s)
        return out

    def candidates(
        self, texts: Sequence[str], found: Sequence[Sequence[Match]] | None = None, floor: np.ndarray | None = None
    ) -> list[Candidate]:
        """Every (window, item) of `texts` whose score reaches the item's `floor` (default: its margin), with the
        lexical share of the item's words in the window and `context_words` words either side, in window and
        item order. `found[d]`: matches already found in text d by n-grams or near matching; windows
        overlapping their spans are not scored (a copied item is not evidence of a paraphrase of its
        neighbours: GSM8K problems all look alike). Windows are embedded and scored `batch_windows` at a
        time."""
        floor = self.threshold if floor is None else np.asarray(floor, dtype=np.float64)
        norms = [normalise_words(t) for t in texts]
        wins: list[Window] = []
        for d, norm in enumerate(norms):
            spans = [(m.char_start, m.char_end) for m in found[d]] if found is not None else []
            wins += [
                w
                for w in windows(norm, d, self.window_words, self.stride_words, self.min_words)
                if not any(w.char_start < end and start < w.char_end for start, end in spans)
            ]
        out: list[Candidate] = []
        for b in range(0, len(wins), self.batch_windows):
            block = wins[b : b + self.batch_windows]
            block_texts = [texts[w.doc][w.char_start : w.char_end] for w in block]
            if self.cache is not None:
                emb = self.cache.embed(block_texts, self.embed)
            else:
                emb = np.asarray(self.embed(block_texts), dtype=np.float32)
            s = self.scores(emb)
            s[:, ~self.matchable] = -np.inf
            # scores are rounded to SCORE_DECIMALS before the comparison: float32 sums differ in their last
            # bits with the batch's shape, and how documents fall into batches depends on the task's slice
            rows, cols = np.nonzero(s >= floor[None, :] - 10.0**-SCORE_DECIMALS)
            context: dict[int, set[str]] = {}
            for r, c in zip(rows.tolist(), cols.tolist()):
                score = round(float(s[r, c]), SCORE_DECIMALS)
                if score < floor[c]:
                    continue
                w = block[r]
                if r not in context:
                    words = norms[w.doc].words
                    context[r] = set(words[max(0, w.first - self.context_words) : w.last + 1 + self.context_words])
                lexical = round(lexical_share(self.item_weights[c], context[r], self.item_totals[c]), SCORE_DECIMALS)
                out.append(Candidate(w.doc, c, score, lexical, w))
        return out

    def find_batch(self, texts: Sequence[str], found: Sequence[Sequence[Match]] | None = None) -> list[list[Match]]:
        """Semantic matches of each text, one Match per item (its best confirmed window: score >= the item's
        margin and lexical share >= its lexical threshold) by item index. Items already in `found[d]` are not
        reported again, and windows overlapping their spans are not scored (`candidates`)."""
        best: dict[tuple[int, int], Candidate] = {}
        for cand in self.candidates(texts, found):
            if cand.lexical < self.lexical[cand.item]:
                continue
            key = (cand.doc, cand.item)
            if key not in best or cand.score > best[key].score:
                best[key] = cand
        skip = [{m.item_index for m in f} for f in found] if found is not None else None
        out: list[list[Match]] = [[] for _ in texts]
        for (d, item), cand in sorted(best.items()):
            if skip is not None and item in skip[d]:
                continue
            out[d].append(Match(item, "semantic", cand.score, cand.window.char_start, cand.window.char_end))
        return out

    def find(self, text: str, found: Sequence[Match] = ()) -> list[Match]:
        """Semantic matches of one text (see `find_batch`)."""
        return self.find_batch([text], [found])[0]
