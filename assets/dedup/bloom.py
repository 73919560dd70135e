"""A Bloom filter over (band, band hash) keys: which band hashes an added crawl has, in 16-32 bits per key.

An incremental near-dedup run (a new crawl) needs, of the earlier crawls' band rows, only those sharing a
(band, hash) with a new document: pairs between two earlier documents are frozen. The scatter tasks of the new
crawl's files each build the filter of their rows, the step ORs them, and the tasks of the earlier crawls' files
send on only the rows the filter may contain. A Bloom filter has no false negatives, so every row that can form
a pair with a new document is kept and the rows are exactly those of a run without it; its false positives (under
1% at 16 bits per key, tests/dedup/test_bloom.py) are rows whose bucket holds no new document, whose pairs are
dropped as before.

Blocked: a key sets HASHES bits of one 64-bit word (one word to fetch per key, one sort per batch to add),
words = a power of two. Pure numpy, no Dagster.
"""

from __future__ import annotations

import numpy as np

BITS_PER_KEY = 16
HASHES = 7
MIN_WORDS = 1 << 7
_U64 = np.uint64


def size_for(keys: int) -> int:
    """64-bit words of a filter for `keys` keys: a power of two >= BITS_PER_KEY * keys / 64."""
    need = max(MIN_WORDS, -(-BITS_PER_KEY * max(keys, 1) // 64))
    return 1 << (need - 1).bit_length()


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (wrapping uint64 arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> _U64(27))) * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def word_and_mask(band: np.ndarray, h: np.ndarray, words: int) -> tuple[np.ndarray, np.ndarray]:
    """Each key's word and the HASHES bits it sets there (6 bits of a second mix each)."""
    key = _mix(np.asarray(h).astype(np.int64).view(_U64) ^ _mix(np.asarray(band).astype(_U64) + _U64(1)))
    word = (key & _U64(words - 1)).astype(np.int64)
    bits = _mix(key ^ _U64(0x9E3779B97F4A7C15))
    mask = np.zeros(len(key), _U64)
    for i in range(HASHES):
        mask |= _U64(1) << ((bits >> _U64(6 * i)) & _U64(63))
    return word, mask


def empty(words: int) -> np.ndarray:
    """A filter of `words` 64-bit words with no key."""
    return np.zeros(words, _U64)


def add(words: np.ndarray, band: np.ndarray, h: np.ndarray) -> None:
    """Add the keys (band[i], h[i]) to the filter in place."""
    if not len(h):
        return
    word, mask = word_and_mask(band, h, len(words))
    order = np.argsort(word, kind="stable")
    word, mask = word[order], mask[order]
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])
    words[word[starts]] |= np.bitwise_or.reduceat(mask, starts)


def union_into(words: np.ndarray, other: np.ndarray) -> None:
    """Add every key of filter `other` (of the same size) to `words` in place."""
    np.bitwise_or(words, other, out=words)


def may_contain(words: np.ndarray, band: np.ndarray, h: np.ndarray) -> np.ndarray:
    """True where (band[i], h[i]) may be in the filter; False only where it is certainly not."""
    word, mask = word_and_mask(band, h, len(words))
    return (words[word] & mask) == mask
