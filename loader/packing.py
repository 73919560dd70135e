"""Packing a token stream into fixed `seq_len` sequences, and unpacking it again. Pure numpy, no I/O.

The documents of an epoch, in their global order, form one stream (each document already ends with EOS).
Sequence i is stream tokens [i*seq_len, (i+1)*seq_len); a document cut by a sequence end continues at the
start of the next sequence, so every sequence is a list of *pieces* (position in the epoch order,
token_start, token_end) into documents, and unpacking the pieces gives back the documents exactly.

Per sequence (all arrays of length seq_len unless noted):
- input_ids: the stream tokens, then `pad_id` (the EOS id) as padding after the end of the epoch's stream;
- labels: the next stream token (causal LM targets already shifted), IGNORE_INDEX (-100) where there is none.
  The last position's label is the first token of the next sequence when the stream goes on. Policy
  "masked": no label crosses a document boundary, i.e. the label at a document's last token (its EOS) is
  -100; policy "allowed": the label there is the next document's first token. Padding is always -100;
- loss_mask: 1 where labels != -100, else 0;
- position_ids: 0, 1, ... restarting at every piece (a continued document restarts at 0 too, since it cannot
  attend to its part in the previous sequence) and at the padding;
- segment_ids: index of the piece in the sequence, -1 on padding;
- cu_seqlens (n_segments + 1): 0, the end of each piece, then seq_len when there is padding (the padding
  is one last segment), the layout flash-attention's varlen kernels take. With "allowed" these still describe
  the documents; whether attention crosses them is the model's choice.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

IGNORE_INDEX = -100
POLICIES = ("masked", "allowed")


@dataclass(frozen=True)
class PackedSequence:
    """One packed sequence (see the module docstring for each field)."""

    input_ids: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    position_ids: np.ndarray
    segment_ids: np.ndarray
    cu_seqlens: np.ndarray


def check_policy(policy: str) -> str:
    """The cross-document attention policy, validated."""
    if policy not in POLICIES:
        raise ValueError(f"cross_document_attention must be one of {POLICIES}, got {policy!r}")
    return policy


def stream_offsets(n_tokens_in_order: np.ndarray) -> np.ndarray:
    """Start of each document in the stream, plus the stream length at the end (length n + 1)."""
    out = np.zeros(len(n_tokens_in_order) + 1, dtype=np.int64)
    np.cumsum(np.asarray(n_tokens_in_order, dtype=np.int64), out=out[1:])
    return out


def sequence_pieces(offsets: np.ndarray, seq_index: int, seq_len: int) -> list[tuple[int, int, int]]:
    """(position in the order, token_start, token_end) of every piece of sequence `seq_index`; [] for a
    sequence wholly past the end of the stream (a padding sequence)."""
    total = int(offsets[-1])
    lo, hi = seq_index * seq_len, min((seq_index + 1) * seq_len, total)
    if lo >= total:
        return []
    first = int(np.searchsorted(offsets, lo, side="right")) - 1
    pieces = []
    p = first
    while p < len(offsets) - 1 and offsets[p] < hi:
        start = max(lo, int(offsets[p])) - int(offsets[p])
        end = min(hi, int(offsets[p + 1])) - int(offsets[p])
        if end > start:  # skips empty documents (n_tokens 0), which a valid view never has
            pieces.append((p, start, end))
        p += 1
    return pieces


def next_stream_position(offsets: np.ndarray, seq_index: int, seq_len: int) -> tuple[int, int] | None:
    """(position in the order, token offset) of the stream token right after sequence `seq_index`, or None at
    the end of the stream: the source of that sequence's last label."""
    pos = (seq_index + 1) * seq_len
    if pos >= int(offsets[-1]):
        return None
    p = int(np.searchsorted(offsets, pos, side="right")) - 1
    return p, pos - int(offsets[p])


def pack_sequence(
    pieces: Sequence[np.ndarray],
    ends_document: Sequence[bool],
    next_token: int | None,
    seq_len: int,
    pad_id: int,
    policy: str,
) -> PackedSequence:
    """Pack the token arrays of one sequence's pieces; `ends_document[i]` says piece i ends its document and
    `next_token` is the stream token after the sequence (None at the end of the stream)."""
    check_policy(policy)
    lengths = np.array([len(t) for t in pieces], dtype=np.int64)
    n = int(lengths.sum())
    if n > seq_len:
        raise ValueError(f"pieces hold {n} tokens, more than seq_len {seq_len}")
    if len(ends_document) != len(pieces):
        raise ValueError(f"{len(ends_document)} ends_document flags for {len(pieces)} pieces")
    input_ids = np.full(seq_len, pad_id, dtype=np.int64)
    if n:
        input_ids[:n] = np.concatenate([np.asarray(t, dtype=np.int64) for t in pieces])
    labels = np.full(seq_len, IGNORE_INDEX, dtype=np.int64)
    if n:
        labels[: n - 1] = input_ids[1:n]
        labels[n - 1] = IGNORE_INDEX if next_token is None else int(next_token)
    piece_ends = np.cumsum(lengths)
    if policy == "masked" and n:
        # The label at a document's EOS would be the next document's first token: never learn across that.
        last_of_doc = piece_ends[np.asarray(ends_document, dtype=bool)] - 1
        labels[last_of_doc] = IGNORE_INDEX
    segment_ids = np.full(seq_len, -1, dtype=np.int64)
    position_ids = np.empty(seq_len, dtype=np.int64)
    bounds = [0, *piece_ends.tolist()] + ([seq_len] if n < seq_len else [])
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        position_ids[a:b] = np.arange(b - a)
        if i < len(pieces):
            segment_ids[a:b] = i
    return PackedSequence(
        input_ids=input_ids,
        labels=labels,
        loss_mask=(labels != IGNORE_INDEX).astype(np.int64),
        position_ids=position_ids,
        segment_ids=segment_ids,
        cu_seqlens=np.asarray(bounds, dtype=np.int32),
    )


def pack_documents(
    docs: Sequence[np.ndarray], seq_len: int, pad_id: int, policy: str, n_sequences: int | None = None
) -> list[tuple[PackedSequence, list[tuple[int, int, int]]]]:
    """Pack whole documents (in this order) into sequences with their pieces; `n_sequences` pads the list
    with fully padded sequences (the last global batch of an epoch)."""
    offsets = stream_offsets(np.array([len(d) for d in docs], dtype=np.int64))
    count = -(-int(offsets[-1]) // seq_len)
    out = []
    for i in range(max(count, n_sequences or 0)):
        pieces = sequence_pieces(offsets, i, seq_len)
        nxt = next_stream_position(offsets, i, seq_len)
        out.append(
            (
                pack_sequence(
                    [docs[p][a:b] for p, a, b in pieces],
                    [b == len(docs[p]) for p, a, b in pieces],
                    None if nxt is None else int(docs[nxt[0]][nxt[1]]),
                    seq_len,
                    pad_id,
                    policy,
                ),
                pieces,
            )
        )
    return out


def unpack(sequences: Sequence[tuple[np.ndarray, Sequence[tuple[int, int, int]]]]) -> dict[int, np.ndarray]:
    """Documents back from (input_ids, pieces) pairs: position in the order -> its tokens, concatenated in
    token_start order. Raises ValueError if the pieces of a document leave a gap or overlap."""
    parts: dict[int, list[tuple[int, int, np.ndarray]]] = {}
    for input_ids, pieces in sequences:
        at = 0
        for p, a, b in pieces:
            parts.setdefault(p, []).append((a, b, np.asarray(input_ids[at : at + b - a])))
            at += b - a
    out = {}
    for p, chunks in parts.items():
        chunks.sort(key=lambda c: c[0])
        expect = 0
        for a, b, _ in chunks:
            if a != expect:
                raise ValueError(f"document at order position {p}: piece starts at token {a}, expected {expect}")
            expect = b
        out[p] = np.concatenate([c[2] for c in chunks])
    return out


@dataclass(frozen=True)
class PackedBatch:
    """B consecutive packed sequences of one rank's batch, assembled in one vectorised pass (arrays [B, seq_len]
    except cu_seqlens, flattened over the batch, and the piece arrays, one entry per non-padding segment)."""

    input_ids: np.ndarray
    labels: np.ndarray
    loss_mask: np.ndarray
    position_ids: np.ndarray
    segment_ids: np.ndarray
    cu_seqlens: np.ndarray  # int32, segment starts over the flattened batch, then B * seq_len
    piece_sequence: np.ndarray  # per piece: the sequence (0..B-1) it lies in
    piece_document: np.ndarray  # per piece: index into `doc_starts[:-1]` (the documents passed in)
    piece_start: np.ndarray  # per piece: token_start within its document
    piece_end: np.ndarray


class BlockPool:
    """Output blocks of `pack_batch`, reused once nothing outside the pool references them any more (every batch
    tensor made by torch.from_numpy holds its block): a consumed batch's memory is written again, already
    faulted in and warm in cache, instead of the kernel zeroing fresh pages for every batch (measured: 2x the
    packing cost at 5 MB blocks). At most `max_blocks` blocks and `max_bytes` are kept; beyond that a block is
    simply allocated (and freed with its batches)."""

    def __init__(self, max_blocks: int = 24, max_bytes: int = 128 << 20) -> None:
        self.max_blocks, self.max_bytes = max_blocks, max_bytes
        self._blocks: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"max_blocks": self.max_blocks, "max_bytes": self.max_bytes}  # blocks stay in their process

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["max_blocks"], state["max_bytes"])

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._blocks)

    def take(self, shape: tuple[int, ...], dtype: type = np.int64) -> np.ndarray:
        """A free block of `shape` and `dtype`, from the pool when one is unreferenced, else a new one."""
        dtype = np.dtype(dtype)
        with self._lock:
            blocks = self._blocks
            for i in range(len(blocks)):
                # 2 references: the pool's list and getrefcount's argument, i.e. no batch uses it any more
                if blocks[i].shape == shape and blocks[i].dtype == dtype and sys.getrefcount(blocks[i]) == 2:
                    return blocks[i]
            block = np.empty(shape, dtype=dtype)
            if len(blocks) < self.max_blocks and self.nbytes + block.nbytes <= self.max_bytes:
                blocks.append(block)
            else:  # the oldest-made block of another shape (a changed batch size) makes room
                stale = [i for i in range(len(blocks)) if blocks[i].shape != shape or blocks[i].dtype != dtype]
                if stale:
                    blocks[stale[0]] = block
            return block


def pack_batch(
    stream: np.ndarray,
    t_lo: int,
    total: int,
    doc_starts: np.ndarray,
    n_sequences: int,
    seq_len: int,
    pad_id: int,
    policy: str,
    pool: BlockPool | None = None,
) -> PackedBatch:
    """Pack stream tokens [t_lo, t_lo + n_sequences * seq_len) into `n_sequences` sequences at once.

    `stream` holds the epoch's stream tokens from `t_lo` on, up to one token past the batch (the last label) or
    the stream end `total`; `doc_starts` are the stream offsets of the documents overlapping that range plus the
    end of the last one. Equal, sequence by sequence, to `pack_sequence` (tests pin that); no Python loop over
    tokens or documents.
    """
    check_policy(policy)
    n_out = n_sequences * seq_len
    n_in = max(0, min(n_out, total - t_lo))  # real tokens; padding after
    n_lab = max(0, min(n_out, total - t_lo - 1))  # positions whose next stream token exists
    if len(stream) < min(n_out + 1, max(0, total - t_lo)):
        raise ValueError(f"stream holds {len(stream)} tokens, the batch needs {min(n_out + 1, total - t_lo)}")
    # one allocation for the five arrays (recycled through `pool` when given)
    block = pool.take((5, n_out)) if pool is not None else np.empty((5, n_out), dtype=np.int64)
    input_ids, labels, loss_mask, position_ids, segment_ids = block
    input_ids[:n_in] = stream[:n_in]
    input_ids[n_in:] = pad_id
    labels[:n_lab] = stream[1 : n_lab + 1]
    labels[n_lab:] = IGNORE_INDEX
    doc_starts = np.asarray(doc_starts, dtype=np.int64) - t_lo
    if policy == "masked" and len(doc_starts) > 1:
        last = doc_starts[1:] - 1  # each document's last token (its EOS): no label across the boundary
        last = last[(last >= 0) & (last < n_out)]
        labels[last] = IGNORE_INDEX
        loss_mask.fill(1)  # 1 where labels != IGNORE_INDEX: everywhere but those ends and the tail
        loss_mask[last] = 0
        loss_mask[n_lab:] = 0
    else:
        np.not_equal(labels, IGNORE_INDEX, out=loss_mask)
    inner = doc_starts[(doc_starts > 0) & (doc_starts < n_in)]
    cuts = [np.arange(0, n_out, seq_len, dtype=np.int64), inner]
    if n_in < n_out:
        cuts.append(np.array([n_in], dtype=np.int64))
    starts = np.sort(np.concatenate(cuts))  # sorted and deduplicated (np.unique hashes: 10x slower here)
    starts = starts[np.concatenate(([True], starts[1:] != starts[:-1]))]
    lengths = np.diff(np.append(starts, n_out))
    # positions restart at every segment start: the position minus its segment's start (np.repeat + one
    # subtraction: 4x faster than a running sum), in the narrowest unsigned type a position fits (< seq_len),
    # wrapping: (t - s) mod 2**16 is t - s when that is below 2**16. A quarter of the bytes of int64 arithmetic
    # through the cache (measured at 8 x 8 x 2048 tokens: 118 -> 43 us), cast to int64 on the way out.
    narrow = np.uint16 if seq_len <= 1 << 16 else np.uint32
    np.subtract(_arange(n_out, narrow), np.repeat(starts.astype(narrow), lengths), out=position_ids)
    seq_of = starts // seq_len
    first = np.searchsorted(starts, np.arange(n_sequences, dtype=np.int64) * seq_len)
    # a segment's index in its sequence is < seq_len, -1 on padding: int16 where that fits (68 -> 27 us)
    local = np.arange(len(starts), dtype=np.int64) - first[seq_of]
    real = starts < n_in
    local[~real] = -1
    segment_ids[:] = np.repeat(local.astype(np.int16 if seq_len < 1 << 15 else np.int32), lengths)
    doc = np.searchsorted(doc_starts, starts[real], side="right") - 1
    piece_start = starts[real] - doc_starts[doc] if len(doc) else np.zeros(0, np.int64)
    shape = (n_sequences, seq_len)
    return PackedBatch(
        input_ids=input_ids.reshape(shape),
        labels=labels.reshape(shape),
        loss_mask=loss_mask.reshape(shape),
        position_ids=position_ids.reshape(shape),
        segment_ids=segment_ids.reshape(shape),
        cu_seqlens=np.append(starts, n_out).astype(np.int32),
        piece_sequence=seq_of[real],
        piece_document=doc,
        piece_start=piece_start,
        piece_end=piece_start + lengths[real],
    )


@functools.lru_cache(maxsize=8)
def _arange(n: int, dtype: type = np.int64) -> np.ndarray:
    """0 .. n-1 as `dtype`, wrapped modulo its range for a narrower unsigned type (read-only, cached)."""
    out = np.arange(n, dtype=np.int64).astype(dtype, copy=False)
    out.flags.writeable = False
    return out
