"""The band-hash filter of an incremental near-dedup run: never a false negative, few false positives, the same
bits whatever order or batches the keys come in."""

from __future__ import annotations

import numpy as np

from assets.dedup import bloom


def keys(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 14, n), rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)


def test_every_added_key_is_found_and_few_others_are():
    band, h = keys(200_000, 0)
    words = bloom.size_for(len(h))
    assert words & (words - 1) == 0 and words * 64 >= bloom.BITS_PER_KEY * len(h)
    f = bloom.empty(words)
    for lo in range(0, len(h), 7_000):
        bloom.add(f, band[lo : lo + 7_000], h[lo : lo + 7_000])
    assert bloom.may_contain(f, band, h).all()
    other_band, other_h = keys(200_000, 1)
    assert bloom.may_contain(f, other_band, other_h).mean() < 0.01
    assert bloom.may_contain(f, (band + 1) % 14, h).mean() < 0.01  # the band is part of the key


def test_the_filter_does_not_depend_on_order_or_on_how_it_was_split():
    band, h = keys(50_000, 2)
    words = bloom.size_for(len(h))
    whole = bloom.empty(words)
    bloom.add(whole, band, h)
    halves = [bloom.empty(words), bloom.empty(words)]
    order = np.random.default_rng(3).permutation(len(h))
    bloom.add(halves[0], band[order[:20_000]], h[order[:20_000]])
    bloom.add(halves[1], band[order[20_000:]], h[order[20_000:]])
    bloom.union_into(halves[0], halves[1])
    assert np.array_equal(halves[0], whole)
    empty = bloom.empty(words)
    bloom.add(empty, band[:0], h[:0])
    assert not empty.any() and not bloom.may_contain(empty, band, h).any()
