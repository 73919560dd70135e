"""GPT-3-style decontamination: normalised words with their spans, stable word n-gram hashes, and the
index of evaluation items' n-grams (README.md). No Dagster here.
"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_N = 13  # GPT-3 (Brown et al. 2020, appendix C) and NeMo Curator's TaskDecontamination; datatrove uses 12
DEFAULT_MIN_WORDS = 5  # shorter items are common phrases, not evidence of leakage (MMLU's shortest have 7)

_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")  # letters/digits; an inner apostrophe keeps a word whole
_APOSTROPHES = re.compile(r"['\u2019]")


def _fold(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKD", word) if unicodedata.category(c) != "Mn")


@dataclass(frozen=True)
class NormalisedText:
    """A text's words in normalised form with their character spans in the original text (`ends` exclusive)."""

    words: list[str]
    starts: np.ndarray  # int64, char offset of each word in the original text
    ends: np.ndarray  # int64, exclusive end offset

    def __len__(self) -> int:
        return len(self.words)

    @functools.cached_property
    def hashes(self) -> np.ndarray:
        """The words' BLAKE2b-64 hashes (uint64), computed once per text."""
        return word_hashes(self.words)


def normalise_words(text: str) -> NormalisedText:
    """Words of `text`: lower case, diacritics and inner apostrophes removed, other punctuation and
    whitespace as separators; with each word's (start, end) character span in `text`."""
    words: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    for m in _WORD.finditer(text):
        w = m.group().lower()
        if not w.isascii():
            w = _fold(w)
        if "'" in w or "\u2019" in w:
            w = _APOSTROPHES.sub("", w)
        words.append(w)
        starts.append(m.start())
        ends.append(m.end())
    return NormalisedText(words, np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64))


@functools.lru_cache(maxsize=1 << 18)
def _word_hash(word: str) -> int:
    return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=8).digest(), "little")


def word_hashes(words: Sequence[str]) -> np.ndarray:
    """BLAKE2b-64 of each word's UTF-8 bytes, as uint64 (cached: web text repeats its words)."""
    return np.fromiter((_word_hash(w) for w in words), dtype=np.uint64, count=len(words))


def _constant(label: str) -> int:
    return int.from_bytes(hashlib.blake2b(label.encode(), digest_size=8).digest(), "little") | 1


@functools.lru_cache(maxsize=64)
def _position_constants(n: int) -> np.ndarray:
    k = np.array([_constant(f"tl-ngram-{i}") for i in range(n)], dtype=np.uint64)
    k.setflags(write=False)
    return k


@functools.lru_cache(maxsize=256)
def _length_constant(n: int) -> np.uint64:
    return np.uint64(_constant(f"tl-ngram-length-{n}"))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """64-bit hash of every word n-gram (uint64, one per start position; empty if fewer than n words)."""
    if n < 1:
        raise ValueError(f"n-gram length must be >= 1, got {n}")
    count = len(hashes) - n + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    k = _position_constants(n)
    out = np.full(count, _length_constant(n), dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic mod 2**64 is the point
        for i in range(n):
            out += hashes[i : i + count] * k[i]
        return _splitmix64(out)


def sorted_lookup(sorted_hashes: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query, the [left, right) range of equal values in `sorted_hashes` (empty when absent)."""
    # numpy's binary search reuses its previous bound when the keys arrive in order: sorting the queries
    # first made the lookups into a 420,000-entry index about 7x faster.
    order = np.argsort(queries, kind="stable")
    q = queries[order]
    left = np.empty(len(q), dtype=np.int64)
    right = np.empty(len(q), dtype=np.int64)
    left[order] = np.searchsorted(sorted_hashes, q, side="left")
    right[order] = np.searchsorted(sorted_hashes, q, side="right")
    return left, right


@dataclass(frozen=True)
class Match:
    """An evaluation item found in a document.

    kind "ngram": `score` is the overlap fraction, the share of the item's distinct n-grams present in the
    document. kind "near": `score` is the similarity of the best-aligned document window (see near_match.py).
    [char_start, char_end) is the span of the document covering the matched words."""

    item_index: int
    kind: str
    score: float
    char_start: int
    char_end: int


class NgramIndex:
    """Sorted n-gram hashes of evaluation items, with the index of the item each came from.

    Items shorter than n words (but at least `min_words`) live in a small side index: the hash of their first
    `short_key_len` words (the shortest such item's length) is looked up among the document's windows of
    that length, and a hit is confirmed by the hash of all the item's words at that place. One extra lookup
    per document word instead of one per distinct short length."""

    def __init__(
        self,
        n: int,
        hashes: np.ndarray,
        item_indexes: np.ndarray,
        ngram_counts: np.ndarray,
        short_keys: np.ndarray | None = None,
        short_items: np.ndarray | None = None,
        short_full: np.ndarray | None = None,
        short_lengths: np.ndarray | None = None,
        short_key_len: int = 0,
    ):
        if len(hashes) != len(item_indexes):
            raise ValueError(f"{len(hashes)} hashes but {len(item_indexes)} item indexes")
        self.n = n
        self.hashes = hashes  # uint64, sorted
        self.item_indexes = item_indexes  # int32, parallel to hashes
        self.ngram_counts = ngram_counts  # int32 per item: distinct n-grams, 1 for a short item, 0 if not indexed
        empty = np.empty(0, dtype=np.uint64)
        self.short_keys = empty if short_keys is None else short_keys  # uint64, sorted: first words' hash
        self.short_items = np.empty(0, np.int32) if short_items is None else short_items  # parallel
        self.short_full = empty if short_full is None else short_full  # hash of all the item's words
        self.short_lengths = np.empty(0, np.int32) if short_lengths is None else short_lengths  # words
        self.short_key_len = short_key_len

    @classmethod
    def build(cls, items: Iterable[str | object], n: int = DEFAULT_N, min_words: int = DEFAULT_MIN_WORDS) -> NgramIndex:
        """Index items (`EvalItem`s or plain texts; item_index = position in `items`) by their word n-grams.

        Items of fewer than `min_words` words are not indexed (their `ngram_counts` is 0): a 2-word item would
        match any document that uses the phrase."""
        if n < 1 or min_words < 1:
            raise ValueError(f"n-gram length and min_words must be >= 1, got n={n}, min_words={min_words}")
        parts, owners, counts, short = [], [], [], []
        for i, item in enumerate(items):
            norm = normalise_words(item if isinstance(item, str) else item.text)
            if len(norm) >= n:
                h = np.unique(ngram_hashes(norm.hashes, n))
                parts.append(h)
                owners.append(np.full(len(h), i, dtype=np.int32))
                counts.append(len(h))
            elif len(norm) >= min_words:
                short.append((i, norm.hashes))
                counts.append(1)
            else:
                counts.append(0)
        hashes = np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)
        item_indexes = np.concatenate(owners) if owners else np.empty(0, dtype=np.int32)
        order = np.lexsort((item_indexes, hashes))
        key_len = min((len(h) for _, h in short), default=0)
        short_keys = np.array([ngram_hashes(h[:key_len], key_len)[0] for _, h in short], dtype=np.uint64)
        short_order = np.argsort(short_keys, kind="stable")
        return cls(
            n,
            hashes[order],
            item_indexes[order],
            np.asarray(counts, dtype=np.int32),
            short_keys=short_keys[short_order],
            short_items=np.array([i for i, _ in short], dtype=np.int32)[short_order],
            short_full=np.array([ngram_hashes(h, len(h))[0] for _, h in short], dtype=np.uint64)[short_order],
            short_lengths=np.array([len(h) for _, h in short], dtype=np.int32)[short_order],
            short_key_len=key_len,
        )

    def __len__(self) -> int:
        """Number of (n-gram, item) entries, short items included."""
        return len(self.hashes) + len(self.short_keys)

    @property
    def nbytes(self) -> int:
        """Memory held by the index arrays, in bytes."""
        arrays = (
            self.hashes,
            self.item_indexes,
            self.ngram_counts,
            self.short_keys,
            self.short_items,
            self.short_full,
            self.short_lengths,
        )
        return sum(a.nbytes for a in arrays)

    def _short_hits(self, norm: NormalisedText) -> list[tuple[int, int, int]]:
        # (item, first word, last word) of every short item found whole in the document.
        if not len(self.short_keys) or len(norm) < self.short_key_len:
            return []
        keys = ngram_hashes(norm.hashes, self.short_key_len)
        left, right = sorted_lookup(self.short_keys, keys)
        hits = []
        for pos in np.flatnonzero(right > left):
            for k in range(left[pos], right[pos]):
                length = int(self.short_lengths[k])
                if (
                    pos + length <= len(norm)
                    and ngram_hashes(norm.hashes[pos : pos + length], length)[0] == (self.short_full[k])
                ):
                    hits.append((int(self.short_items[k]), int(pos), int(pos + length - 1)))
        return hits

    def find(self, text: str | NormalisedText) -> list[Match]:
        """Items sharing at least one n-gram with the document (short items: found whole), one Match per item,
        by item index."""
        norm = text if isinstance(text, NormalisedText) else normalise_words(text)
        matches = [
            Match(item, "ngram", 1.0, int(norm.starts[first]), int(norm.ends[last]))
            for item, first, last in _first_per_item(self._short_hits(norm))
        ]
        doc_hashes = ngram_hashes(norm.hashes, self.n)
        if len(doc_hashes) and len(self.hashes):
            matches += self._ngram_matches(norm, doc_hashes)
        return sorted(matches, key=lambda m: m.item_index)

    def _ngram_matches(self, norm: NormalisedText, doc_hashes: np.ndarray) -> list[Match]:
        left, right = sorted_lookup(self.hashes, doc_hashes)
        hit = np.flatnonzero(right > left)
        if not len(hit):
            return []
        left, right = left[hit], right[hit]
        # Expand each hit window to every index entry (item) holding that hash.
        sizes = right - left
        entry = np.repeat(left - np.cumsum(sizes) + sizes, sizes) + np.arange(sizes.sum())
        items = self.item_indexes[entry]
        hashes = self.hashes[entry]
        first_word = np.repeat(hit, sizes)

        order = np.argsort(items, kind="stable")
        items, hashes, first_word = items[order], hashes[order], first_word[order]
        bounds = np.flatnonzero(np.diff(items)) + 1
        matches = []
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(items)]])):
            item = int(items[lo])
            distinct = len(np.unique(hashes[lo:hi]))
            matches.append(
                Match(
                    item_index=item,
                    kind="ngram",
                    score=distinct / int(self.ngram_counts[item]),
                    char_start=int(norm.starts[first_word[lo:hi].min()]),
                    char_end=int(norm.ends[first_word[lo:hi].max() + self.n - 1]),
                )
            )
        return matches


def _first_per_item(hits: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    seen: dict[int, tuple[int, int, int]] = {}
    for hit in hits:
        if hit[0] not in seen or hit[1] < seen[hit[0]][1]:
            seen[hit[0]] = hit
    return list(seen.values())
