"""Global order and step arithmetic: purity, permutation, locality, golden hash, slicing errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.errors import BadWorldSize
from loader.order import (
    BLOCKS_PER_WINDOW,
    Schedule,
    chunk_blocks,
    epoch_order,
    rank_slice,
    window_major_order,
    worker_steps,
)

SHA = "ab" * 32
# sha256 of epoch_order(chunk_blocks(1000, 16), SHA, 7, 3) as little-endian int64: pins the order across
# machines and versions (a change here changes every run view's batches: bump ORDER_VERSION instead).
GOLDEN = "948fdc678e68a658daf499ef693f9f62f2504c7a7a19a98ae47099bbbd7d3fd7"


def order_digest() -> str:
    return hashlib.sha256(epoch_order(chunk_blocks(1000, 16), SHA, 7, 3).astype("<i8").tobytes()).hexdigest()


def test_golden_order_is_stable_across_processes_and_hash_seeds():
    assert order_digest() == GOLDEN
    code = "from tests.loader.test_loader_order import order_digest; print(order_digest())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        cwd=os.getcwd(),
    )
    assert out.stdout.strip() == GOLDEN


@given(n=st.integers(1, 400), block=st.integers(1, 50), seed=st.integers(0, 2**31), epoch=st.integers(0, 50))
def test_order_is_a_permutation_with_windowed_locality(n, block, seed, epoch):
    blocks = chunk_blocks(n, block)
    order = epoch_order(blocks, SHA, seed, epoch)
    assert sorted(order.tolist()) == list(range(n))
    # each window of the order draws from at most BLOCKS_PER_WINDOW blocks, and windows do not interleave
    seen_blocks = blocks[order]
    changes, current = 0, set()
    for b in seen_blocks:
        if b not in current:
            if len(current) == BLOCKS_PER_WINDOW:
                current, changes = set(), changes + 1
            current.add(int(b))
    assert len(set(seen_blocks.tolist())) <= (changes + 1) * BLOCKS_PER_WINDOW


def test_order_depends_on_every_argument_and_nothing_else():
    blocks = chunk_blocks(500, 10)
    base = epoch_order(blocks, SHA, 1, 0)
    assert np.array_equal(base, epoch_order(blocks.copy(), SHA, 1, 0))
    for other in (epoch_order(blocks, SHA, 2, 0), epoch_order(blocks, SHA, 1, 1), epoch_order(blocks, "cd" * 32, 1, 0)):
        assert not np.array_equal(base, other)


def test_repetitions_get_their_own_blocks():
    rep = np.array([0] * 10 + [1] * 10)
    blocks = chunk_blocks(20, 100, rep)
    assert len(set(blocks[:10])) == 1 and len(set(blocks[10:])) == 1 and blocks[0] != blocks[10]


def test_schedule_pads_the_last_global_batch_and_never_drops():
    s = Schedule(tokens_per_epoch=1000, seq_len=64, global_batch_size=4, epochs=2)
    assert s.sequences_per_epoch == 16 and s.steps_per_epoch == 4 and s.total_steps == 8
    s = Schedule(tokens_per_epoch=1000, seq_len=64, global_batch_size=6, epochs=None)
    assert s.sequences_per_epoch == 16 and s.steps_per_epoch == 3  # 18 slots: 2 fully padded sequences
    assert s.locate(7) == (2, 1)
    assert s.sequences(7, rank=1, world_size=3) == (2, range(8, 10))
    with pytest.raises(ValueError, match="past the last step"):
        Schedule(1000, 64, 4, epochs=1).locate(4)


def test_rank_slices_tile_the_global_batch_and_bad_worlds_are_named():
    for w in (1, 2, 3, 4, 6, 8, 12, 24):
        assert [i for r in range(w) for i in range(*rank_slice(24, w, r))] == list(range(24))
    with pytest.raises(BadWorldSize, match="does not divide"):
        rank_slice(24, 5, 0)
    with pytest.raises(BadWorldSize, match="rank 4"):
        rank_slice(24, 4, 4)


def test_worker_steps_round_robin():
    assert [list(worker_steps(5, 12, 3, w)) for w in range(3)] == [[5, 8, 11], [6, 9], [7, 10]]
    assert list(worker_steps(5, 8, 0, 0)) == [5, 6, 7]


@given(
    st.lists(st.tuples(st.integers(0, 70_000), st.integers(0, 2**64 - 1) | st.integers(0, 3)), max_size=300),
)
def test_window_major_order_is_the_lexsort_of_windows_then_keys_then_position(rows):
    """The fast path (quicksort of the keys, stable sort of the windows) and the fallback for equal keys (small
    keys collide often here) both give np.lexsort's order; windows past 2**16 too."""
    window = np.array([w for w, _ in rows], dtype=np.int64)
    keys = np.array([k for _, k in rows], dtype=np.uint64)
    got = window_major_order(window, keys)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.lexsort((keys, window)))
