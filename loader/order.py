"""The global order and the step arithmetic: pure functions of integers, no I/O.

Order of epoch e (`epoch_order`). Every sample of the view (repetitions are rows) is served once per epoch.
Samples carry a *block id*: the source row group of their document, split by repetition, so the copies of a
repeated document land in different blocks (`loader.view` numbers blocks; an in-memory view uses chunks of
sample_index). The shuffle ("block", ORDER_VERSION below) is:
  1. blocks are permuted by a keyed 64-bit hash of their id;
  2. consecutive permuted blocks are grouped into windows of `BLOCKS_PER_WINDOW` blocks;
  3. windows keep that order, and the samples inside a window are permuted by a keyed hash of sample_index.
A reader therefore needs only the row groups of one window at a time (read locality, bounded memory), while
neighbouring sequences still mix documents from several row groups. The key is sha256 of (ORDER_VERSION,
manifest sha256, seed, epoch) and the hash is splitmix64 in uint64 numpy arithmetic, so the order is identical
on every machine, Python/NumPy version and PYTHONHASHSEED (no RNG stream whose algorithm may change).

Step arithmetic (`Schedule`). Epoch e concatenates the documents in that order into one token stream of T
tokens (T = the view's n_tokens, the same every epoch) and cuts it into S = ceil(T / seq_len) sequences; the
last one is padded. A global batch is `global_batch_size` (G) consecutive sequences, so an epoch has
ceil(S / G) global steps. Drop/pad rule: nothing is dropped; the last global batch of an epoch is filled up
with fully padded sequences (loss mask 0 everywhere), so every token of every sample is served exactly once
per epoch and every rank always gets the same number of sequences. Sequences never cross an epoch boundary.
Global step k (counted from 0 over all epochs) is epoch k // steps_per_epoch; it holds sequences
[j*G, (j+1)*G) of that epoch, j = k % steps_per_epoch, whatever the world size. Rank r of W takes the
contiguous slice [r*G/W, (r+1)*G/W) (W must divide G); DataLoader worker w of n takes the steps
start + w, start + w + n, ... (the order torch's DataLoader collects them in).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from loader.errors import BadWorldSize

ORDER_VERSION = "block-window/1"
BLOCKS_PER_WINDOW = 8

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic is intended)."""
    with np.errstate(over="ignore"):
        z = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
        return z ^ (z >> np.uint64(31))


def epoch_key(manifest_sha256: str, seed: int, epoch: int, purpose: str) -> np.uint64:
    """The 64-bit shuffle key of one (view, seed, epoch) for one purpose ("blocks" or "samples")."""
    if epoch < 0:
        raise ValueError(f"epoch must be >= 0, got {epoch}")
    blob = f"{ORDER_VERSION}|{manifest_sha256}|{int(seed)}|{int(epoch)}|{purpose}".encode()
    return np.uint64(int.from_bytes(hashlib.sha256(blob).digest()[:8], "little"))


def keyed_hash(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """A keyed pseudo-random uint64 per value (values: non-negative integers)."""
    return _splitmix64(_splitmix64(values.astype(np.uint64)) ^ key)


def epoch_order(
    block_ids: np.ndarray, manifest_sha256: str, seed: int, epoch: int, blocks_per_window: int = BLOCKS_PER_WINDOW
) -> np.ndarray:
    """Sample indices (positions in sample_index order) in the order epoch `epoch` serves them."""
    return epoch_windows(block_ids, manifest_sha256, seed, epoch, blocks_per_window)[0]


def epoch_windows(
    block_ids: np.ndarray, manifest_sha256: str, seed: int, epoch: int, blocks_per_window: int = BLOCKS_PER_WINDOW
) -> tuple[np.ndarray, np.ndarray]:
    """(`epoch_order`, the positions in that order where a new window of blocks begins, 0 first)."""
    block_ids = np.asarray(block_ids, dtype=np.int64)
    if blocks_per_window < 1:
        raise ValueError(f"blocks_per_window must be >= 1, got {blocks_per_window}")
    if len(block_ids) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    blocks, inverse = np.unique(block_ids, return_inverse=True)
    block_rank = np.empty(len(blocks), dtype=np.int64)
    perm = np.argsort(keyed_hash(blocks, epoch_key(manifest_sha256, seed, epoch, "blocks")), kind="stable")
    block_rank[perm] = np.arange(len(blocks))
    window = block_rank[inverse] // blocks_per_window
    sample_keys = keyed_hash(np.arange(len(block_ids)), epoch_key(manifest_sha256, seed, epoch, "samples"))
    order = window_major_order(window, sample_keys)
    served = window[order]  # non-decreasing
    return order, np.flatnonzero(np.concatenate(([True], served[1:] != served[:-1])))


def window_major_order(window: np.ndarray, sample_keys: np.ndarray) -> np.ndarray:
    """Sample positions by window, then by sample key, then by position: `np.lexsort((sample_keys, window))`, the
    order's definition, computed as a quicksort of the keys and a stable (radix, for < 2**16 windows) sort of the
    windows, which is that order whenever no two keys are equal (4.7 -> 1.0 ms for 40,960 samples); with a 64-bit
    collision it is the lexsort itself."""
    by_key = np.argsort(sample_keys)
    ranked = sample_keys[by_key]
    if np.any(ranked[1:] == ranked[:-1]):
        return np.lexsort((sample_keys, window)).astype(np.int64)
    w = window[by_key]
    if int(w.max(initial=0)) < 1 << 16:
        w = w.astype(np.uint16)
    return by_key[np.argsort(w, kind="stable")].astype(np.int64, copy=False)


def chunk_blocks(n_samples: int, block_size: int, repetition: np.ndarray | None = None) -> np.ndarray:
    """Block ids for a view without a row-group layout: runs of `block_size` samples in sample_index order,
    a new block wherever the repetition changes."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    ids = np.arange(n_samples, dtype=np.int64) // block_size
    if repetition is not None:
        ids = ids * (int(np.max(repetition, initial=0)) + 1) + np.asarray(repetition, dtype=np.int64)
    return ids


@dataclass(frozen=True)
class Schedule:
    """Where every global step's sequences lie: T tokens per epoch, `seq_len`, global batch size G."""

    tokens_per_epoch: int
    seq_len: int
    global_batch_size: int
    epochs: int | None = None  # None: unbounded

    def __post_init__(self) -> None:
        if self.tokens_per_epoch < 1:
            raise ValueError(f"a run view with {self.tokens_per_epoch} tokens has nothing to serve")
        if self.seq_len < 2:
            raise ValueError(f"seq_len must be >= 2, got {self.seq_len}")
        if self.global_batch_size < 1:
            raise ValueError(f"global_batch_size must be >= 1, got {self.global_batch_size}")
        if self.epochs is not None and self.epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None, got {self.epochs}")

    @property
    def sequences_per_epoch(self) -> int:
        """Sequences holding tokens (the last one possibly part padding)."""
        return -(-self.tokens_per_epoch // self.seq_len)

    @property
    def steps_per_epoch(self) -> int:
        return -(-self.sequences_per_epoch // self.global_batch_size)

    @property
    def total_steps(self) -> int | None:
        """Global steps until the epoch policy is exhausted (None: unbounded)."""
        return None if self.epochs is None else self.epochs * self.steps_per_epoch

    def locate(self, step: int) -> tuple[int, int]:
        """(epoch, step within the epoch) of global step `step`."""
        if step < 0:
            raise ValueError(f"global step must be >= 0, got {step}")
        if self.total_steps is not None and step >= self.total_steps:
            raise ValueError(
                f"global step {step} is past the last step {self.total_steps - 1} "
                f"({self.epochs} epochs x {self.steps_per_epoch} steps)"
            )
        return divmod(step, self.steps_per_epoch)

    def sequences(self, step: int, rank: int = 0, world_size: int = 1) -> tuple[int, range]:
        """(epoch, sequence indices within the epoch) that `rank` of `world_size` serves at global `step`;
        indices >= sequences_per_epoch are fully padded sequences."""
        epoch, j = self.locate(step)
        lo, hi = rank_slice(self.global_batch_size, world_size, rank)
        base = j * self.global_batch_size
        return epoch, range(base + lo, base + hi)


def rank_slice(global_batch_size: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of a rank's sequences inside a global batch."""
    if world_size < 1 or global_batch_size % world_size:
        raise BadWorldSize(
            f"world size {world_size} does not divide the global batch size "
            f"{global_batch_size}; pick a world size among its divisors"
        )
    if not 0 <= rank < world_size:
        raise BadWorldSize(f"rank {rank} is outside 0..{world_size - 1}")
    per_rank = global_batch_size // world_size
    return rank * per_rank, (rank + 1) * per_rank


def worker_steps(start: int, stop: int | None, num_workers: int, worker_id: int) -> range:
    """Global steps a DataLoader worker produces, in the round-robin order the DataLoader collects them."""
    n = max(num_workers, 1)
    if not 0 <= worker_id < n:
        raise ValueError(f"worker id {worker_id} is outside 0..{n - 1}")
    return range(start + worker_id, stop if stop is not None else 2**62, n)
