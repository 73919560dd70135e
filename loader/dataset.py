"""Serving a run view to PyTorch ranks: batch plan, IterableDataset, the training-side loader and its state.

`BatchPlan` is the pure core: (view, global batch size G, seed, packing) -> the batch any rank serves at any
global step (`loader.order` has the arithmetic and the drop/pad rule). `RunViewDataset` is a torch
IterableDataset yielding this rank's slice of consecutive global batches (for `DataLoader(batch_size=None)`;
workers take steps round-robin, the order the DataLoader collects them in). `RunViewLoader` is what a
training loop holds: it iterates (optionally through DataLoader workers and a bounded `Prefetcher`), checks
that batches arrive in global-step order, records metrics, and owns the one global cursor.

State (`state_dict()`): {"format", "state_version", "run_view_id", "global_step" (global steps consumed: the
one cursor, the same on every rank, independent of world size and workers), "epoch" (informational),
"fingerprint" {manifest_sha256, tokenizer_id, packing, seed, state_version, order, global_batch_size},
"fingerprint_sha256"}. `load_state_dict` refuses, with a named `StateMismatch` subclass, a state from another
run view, manifest, tokenizer, seed, packing, global batch size or state/order version. The world size and
the number of workers are *not* in the state: resuming on any world size dividing G continues with global
batch `global_step`, so nothing is skipped or served twice (elastic resume).

torchdata's StatefulDataLoader protocol: `RunViewDataset` has `state_dict()` / `load_state_dict()`. In the main
process (num_workers=0) its state is the global cursor above. Inside DataLoader worker w of n, its state also
carries {"worker": {"id", "num_workers", "next_step"}} so that StatefulDataLoader, which restores each worker
from its own snapshot, resumes every worker on its own stride; a state without "worker" (e.g.
`RunViewLoader.state_dict()`) resumes all workers from the global cursor. torchdata is not required.

Batch dict (one per global step, this rank's G / world_size sequences of seq_len):
  input_ids, labels, loss_mask, position_ids, segment_ids: LongTensor [B, seq_len] (see loader.packing);
  cu_seqlens: IntTensor over the flattened batch [0 .. B*seq_len] (flash-attn varlen), max_seqlen: int;
  sequence_index: LongTensor [B], index of each sequence within its epoch;
  run_view_id, step (global), epoch, rank, world_size;
  documents: per sequence a list of (doc_id, token_start, token_end), the audit spans;
  sample_indices: per sequence the sample_index of each of those spans (tells repetitions apart);
  both read-only sequences built into those lists on first access (loader.spans: equal to the lists).
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from loader.errors import (
    BadWorldSize,
    GlobalBatchSizeMismatch,
    LoaderError,
    MalformedState,
    ManifestMismatch,
    PackingMismatch,
    RunViewMismatch,
    SeedMismatch,
    StateVersionMismatch,
    TokenizerMismatch,
)
from loader.metrics import LoaderMetrics
from loader.order import ORDER_VERSION, Schedule, epoch_windows, rank_slice, worker_steps
from loader.packing import (
    BlockPool,
    PackedBatch,
    check_policy,
    pack_batch,
    sequence_pieces,
    stream_offsets,
)
from loader.spans import AuditSpans, Pieces, SampleIndices
from loader.view import RunView

STATE_FORMAT = "tokenlake.loader_state"
STATE_VERSION = 1
DEFAULT_PREFETCH = 8  # batches read ahead (40 bytes a token each): covers a block window's decode burst (8 row groups)
_EPOCHS_CACHED = 2
# a stream segment (`BatchPlan._segment`): whole block windows, at least SEGMENT_TOKENS tokens (a window of row
# groups of 4 documents holds ~500 tokens: one segment per window made a read of 8 steps build ~35); two kept per
# plan, so a read straddling two segments finds both
SEGMENT_TOKENS = 1 << 18
_SEGMENTS_KEPT = 2
# A DataLoader worker hands over a chunk of consecutive steps per item (compact: ~2 bytes a token): the steps of
# WORKER_CHUNK_WINDOWS whole block windows (`BatchPlan.worker_chunks`; a step that straddles two windows reads
# both, so one window per chunk would still have every worker decode most row groups), at least
# WORKER_CHUNK_STEPS steps (260 KB at 8 x 2048) and at most WORKER_CHUNK_TOKENS of this rank's tokens (8 MB)
WORKER_CHUNK_STEPS = 8
WORKER_CHUNK_TOKENS = 1 << 22
WORKER_CHUNK_WINDOWS = 2
# in process (world size 1), consecutive steps read, verified and packed by one vectorised pass (amortises its
# fixed cost): at most RUN_STEPS steps and RUN_TOKENS tokens (~5 MB of tensors), so big batches go one at a time
RUN_STEPS = 8
RUN_TOKENS = 1 << 17
# one per process, shared by every plan (a new loader reuses the blocks an old one's dropped batches left)
BLOCK_POOL = BlockPool()


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): explicit arguments, else torch.distributed when initialised, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise BadWorldSize(f"give both rank and world_size or neither, got rank={rank} world_size={world_size}")
    if rank is not None:
        return int(rank), int(world_size)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class _SegmentRead:
    """One stream segment read on its own daemon thread: `result()` waits for its tokens (or raises what the read
    raised: a corrupt row group stops the loader when the segment is needed, never before and never silently);
    a read started in another process (a DataLoader worker forked while it ran) is never waited for."""

    def __init__(self, key: tuple[int, int, int], read: Callable[..., np.ndarray]) -> None:
        self.key, self._pid = key, os.getpid()
        self._tokens: np.ndarray | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(read,), name="tokenlake-segment-read", daemon=True)
        self._thread.start()

    def _run(self, read: Callable[..., np.ndarray]) -> None:
        try:
            self._tokens = read(*self.key)
        except BaseException as exc:  # handed to the thread that needs the segment
            self._error = exc

    def wait(self) -> bool:
        """Whether the read finished in this process (False: it was started before a fork)."""
        if self._pid != os.getpid():
            return False
        self._thread.join()
        return True

    def result(self) -> np.ndarray | None:
        """The tokens, None when the read belongs to another process."""
        if not self.wait():
            return None
        if self._error is not None:
            raise self._error
        return self._tokens


class BatchPlan:
    """Which tokens every rank serves at every global step of a run view: pure given the view."""

    def __init__(
        self,
        view: RunView,
        global_batch_size: int,
        *,
        seed: int | None = None,
        seq_len: int | None = None,
        cross_document_attention: str | None = None,
        epochs: int | None | str = "manifest",
    ):
        """Defaults come from the manifest; overriding seed or packing makes a different (fingerprinted) run."""
        self.view = view
        self.seed = view.seed if seed is None else int(seed)
        packing = view.packing
        self.seq_len = int(packing["seq_len"] if seq_len is None else seq_len)
        self.policy = check_policy(
            packing["cross_document_attention"] if cross_document_attention is None else cross_document_attention
        )
        self.eos_id = int(packing["eos_id"])
        self.schedule = Schedule(
            view.tokens_per_epoch, self.seq_len, int(global_batch_size), view.epochs if epochs == "manifest" else epochs
        )
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._doc_ids = np.asarray(view.doc_ids, dtype=object)
        self._pool = BLOCK_POOL  # packed blocks reused once the batches made from them are dropped
        # (epoch, first order position held, end) -> (its stream offset, the tokens in serving order): the last
        # stream segments read (`_segment`)
        self._segments: OrderedDict[tuple[int, int, int], tuple[int, np.ndarray]] = OrderedDict()
        self.read_ahead = True  # read the next segment on a thread while this one is packed (`_read_ahead`)
        self._ahead: _SegmentRead | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_segments"] = OrderedDict()  # tokens stay in their process
        state["_ahead"] = None  # and so do threads
        return state

    @property
    def global_batch_size(self) -> int:
        return self.schedule.global_batch_size

    @property
    def packing(self) -> dict:
        return {"seq_len": self.seq_len, "eos_id": self.eos_id, "cross_document_attention": self.policy}

    def fingerprint(self) -> dict:
        """What a saved cursor is only valid for."""
        return {
            "manifest_sha256": self.view.manifest_sha256,
            "tokenizer_id": self.view.tokenizer_id,
            "packing": self.packing,
            "seed": self.seed,
            "state_version": STATE_VERSION,
            "order": ORDER_VERSION,
            "global_batch_size": self.global_batch_size,
        }

    def epoch_layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(sample indices in serving order, stream offsets of those samples) for `epoch` (cached)."""
        return self._epoch(epoch)[:2]

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(order, stream offsets, the steps of the epoch where a block window begins, the order positions where
        one begins followed by the number of samples), cached."""
        if epoch in self._epochs:
            return self._epochs[epoch]
        order, window_starts = epoch_windows(self.view.block_ids, self.view.manifest_sha256, self.seed, epoch)
        offsets = stream_offsets(self.view.n_tokens[order])
        step_tokens = self.schedule.global_batch_size * self.seq_len
        window_steps = np.unique(offsets[window_starts] // step_tokens)
        layout = (order, offsets, window_steps, np.append(window_starts, len(order)))
        self._epochs[epoch] = layout
        while len(self._epochs) > _EPOCHS_CACHED:
            self._epochs.popitem(last=False)
        return layout

    def worker_chunks(
        self, start: int, stop: int | None, min_steps: int, max_steps: int, windows: int = 1
    ) -> Iterator[range]:
        """Consecutive runs of global steps from `start` (before `stop`) that DataLoader workers take in turn.
        A run ends where a block window begins (a worker then reads the row groups of its own windows; with
        fixed-size runs every worker decoded every row group of every window), once it is at least `min_steps`
        long (small windows are merged), after at most `max_steps`, and at the end of an epoch. A pure function
        of the plan, so every worker cuts the same runs."""
        spe = self.schedule.steps_per_epoch
        end = stop if stop is not None else 2**62
        k = int(start)
        while k < end:
            epoch = k // spe
            base = epoch * spe
            cuts = base + self._epoch(epoch)[2]
            i = max(
                int(np.searchsorted(cuts, k, side="right")) + windows - 1, int(np.searchsorted(cuts, k + min_steps))
            )
            cut = int(cuts[i]) if i < len(cuts) else base + spe
            nxt = min(cut, k + max_steps, base + spe, end)
            yield range(k, nxt)
            k = nxt

    def spans(
        self, step: int, rank: int = 0, world_size: int = 1
    ) -> tuple[int, list[int], list[list[tuple[int, int, int]]]]:
        """(epoch, sequence indices, per sequence [(sample_index, token_start, token_end)]) of a rank's batch."""
        epoch, seqs = self.schedule.sequences(step, rank, world_size)
        order, offsets = self.epoch_layout(epoch)
        out = [[(int(order[p]), a, b) for p, a, b in sequence_pieces(offsets, i, self.seq_len)] for i in seqs]
        return epoch, list(seqs), out

    def run_length(self, step: int, world_size: int, limit: int, stop: int | None = None) -> int:
        """How many consecutive global steps from `step` (at most `limit`, before `stop`) one `read` can serve:
        their sequences must be one contiguous range of one epoch, i.e. world size 1; otherwise 1."""
        if world_size != 1 or limit <= 1:
            return 1
        spe = self.schedule.steps_per_epoch
        n = min(int(limit), spe - step % spe)
        if stop is not None:
            n = min(n, int(stop) - step)
        return max(1, n)

    def stream_window(
        self, step: int, rank: int = 0, world_size: int = 1, n_steps: int = 1
    ) -> tuple[int, range, int, int, int, int]:
        """(epoch, sequence indices, t_lo, t_end, p_lo, p_hi): the stream tokens [t_lo, t_end) a rank's batch
        (`n_steps` consecutive batches: world size 1, one epoch, see `run_length`) reads (its sequences plus
        the next token, for the last label) and the epoch order positions [p_lo, p_hi) of the documents
        holding them."""
        epoch, seqs = self.schedule.sequences(step, rank, world_size)
        if n_steps > 1:
            if world_size != 1 or self.schedule.locate(step + n_steps - 1)[0] != epoch:
                raise ValueError(f"{n_steps} steps from {step} at world size {world_size} are not one stream range")
            seqs = range(seqs.start, seqs.start + n_steps * len(seqs))
        _, offsets = self.epoch_layout(epoch)
        total = int(offsets[-1])
        t_lo = seqs.start * self.seq_len
        t_end = min(t_lo + len(seqs) * self.seq_len + 1, total)
        if t_end <= t_lo:
            return epoch, seqs, t_lo, t_lo, len(offsets) - 1, len(offsets) - 1
        p_lo = int(np.searchsorted(offsets, t_lo, side="right")) - 1
        p_hi = int(np.searchsorted(offsets, t_end - 1, side="right"))
        return epoch, seqs, t_lo, t_end, p_lo, p_hi

    def samples_needed(self, step: int, rank: int = 0, world_size: int = 1) -> np.ndarray:
        """Sample indices a rank's batch at `step` reads (what a prefetcher fetches ahead of time)."""
        epoch, _, _, _, p_lo, p_hi = self.stream_window(step, rank, world_size)
        return self.epoch_layout(epoch)[0][p_lo:p_hi]

    def read(
        self, step: int, rank: int = 0, world_size: int = 1, n_steps: int = 1, last_step: int | None = None
    ) -> dict[str, Any]:
        """The compact form of a rank's batch (or of `n_steps` consecutive ones, see `run_length`): its stream
        tokens (read and verified, source dtype) and where the documents start; a few tens of KB a step that a
        DataLoader worker pickles in one piece (`assemble_steps` expands it). `last_step`: the last step of the
        epoch this reader serves before it skips ahead (a DataLoader worker's chunk): the stream segment read
        now ends by the documents that step needs, instead of reading the next worker's windows. At world size
        > 1 the first read of a plan (a start or a resume) reads its own documents only: a rank's batch is 1/W
        of the stream, and its first one need not wait for a whole segment (rank 7 of 8's first batch on the
        bench's 10,240-row-group view: 560 row groups -> 40). At world size 1 the segment is served by the next
        steps anyway, and reading it in two parts costs a second gather of its window (steps 8-15 of the
        bench's prod view: 1.1 -> 2.3-3.0 CPU ms), so the first read takes it whole."""
        epoch, seqs, t_lo, t_end, p_lo, p_hi = self.stream_window(step, rank, world_size, n_steps)
        p_cap = None
        if last_step is not None and last_step >= step:
            p_cap = max(p_hi, self.stream_window(last_step, rank, world_size)[5])
        elif not self._segments and world_size > 1:  # a rank's first read (a start or a resume): see above
            p_cap = p_hi
        order, offsets = self.epoch_layout(epoch)
        # the segment after the newest one is read on a thread from the second read on: the first batch (a start,
        # a resume) does not share the CPU with a read it does not need
        self._read_ahead(rank, world_size, last_step)
        stream = self._stream_tokens(epoch, p_lo, t_lo, t_end, p_cap)
        return {
            "step": int(step),
            "n_steps": int(n_steps),
            "epoch": int(epoch),
            "rank": int(rank),
            "world_size": int(world_size),
            "sequences": (seqs.start, seqs.stop),
            "t_lo": int(t_lo),
            "total": int(offsets[-1]),
            "stream": stream,
            "doc_starts": offsets[p_lo : p_hi + 1],
            "samples": order[p_lo:p_hi],
        }

    def assemble(self, compact: Mapping[str, Any]) -> dict[str, Any]:
        """The batch dict of a one-step compact batch (`assemble_steps` for several)."""
        (batch,) = self.assemble_steps(compact)
        return batch

    def assemble_steps(self, compact: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The batch dicts of a compact read: packing, masks, positions and audit spans in one vectorised pass
        over all its steps; each step's tensors are row slices (views) of one block."""
        seqs = range(*compact["sequences"])
        packed = pack_batch(
            compact["stream"],
            compact["t_lo"],
            compact["total"],
            compact["doc_starts"],
            len(seqs),
            self.seq_len,
            self.eos_id,
            self.policy,
            self._pool,
        )
        c = compact
        n = int(c.get("n_steps", 1))
        return self._collate(c["step"], c["epoch"], c["rank"], c["world_size"], seqs, c["samples"], packed, n)

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """The batch `rank` of `world_size` serves at global `step`, tokens read and verified."""
        return self.assemble(self.read(step, rank, world_size))

    def batches(self, step: int, n_steps: int, rank: int = 0, world_size: int = 1) -> list[dict[str, Any]]:
        """The batches of global steps step .. step + n_steps - 1 (one read when `run_length` allows it)."""
        return self.assemble_steps(self.read(step, rank, world_size, n_steps))

    def _stream_tokens(self, epoch: int, p_lo: int, t_lo: int, t_end: int, p_cap: int | None = None) -> np.ndarray:
        """Stream tokens [t_lo, t_end) of `epoch` (the document at order position `p_lo` holds t_lo): a slice of
        the stream segment holding them (a copy only where a read straddles segments; a new segment ends by
        order position `p_cap` when given)."""
        if t_end <= t_lo:
            return np.zeros(0, dtype=np.uint16)
        parts = []
        while True:
            p_from, p_end, t_from, tokens = self._segment(epoch, p_lo, p_cap)
            parts.append(tokens[t_lo - t_from : t_end - t_from])
            t_lo, p_lo = t_from + len(tokens), p_end  # the segment's end
            if t_lo >= t_end:
                break
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _segment(self, epoch: int, p_lo: int, p_cap: int | None = None) -> tuple[int, int, int, np.ndarray]:
        """(p_from, p_end, t_from, the stream tokens of order positions [p_from, p_end)) holding position p_lo:
        whole block windows from the one holding p_lo (at least SEGMENT_TOKENS tokens: views of small row groups
        have small windows), read, verified and laid out in serving order once, from where the first read in it
        begins (a resumed run or a DataLoader worker's first step reads no earlier documents), then sliced by
        every read in them; a new one ends by order position `p_cap` when given (what this reader reads before
        it skips ahead). The last `_SEGMENTS_KEPT` segments are kept; one read ahead (`_read_ahead`) is taken
        when it is the segment asked for."""
        key = self._kept_segment(epoch, p_lo)
        if key is not None:
            self._segments.move_to_end(key)
            return key[1], key[2], *self._segments[key]
        key = (epoch, p_lo, self._segment_end(epoch, p_lo, p_cap))
        ahead, self._ahead = self._ahead, None
        tokens = ahead.result() if ahead is not None and ahead.key == key else None
        if tokens is None:
            if ahead is not None:
                ahead.wait()  # the source is read by one thread at a time
            tokens = self._read_segment(*key)
        self._segments[key] = (int(self._epoch(epoch)[1][p_lo]), tokens)
        while len(self._segments) > _SEGMENTS_KEPT:
            self._segments.popitem(last=False)
        return key[1], key[2], *self._segments[key]

    def _kept_segment(self, epoch: int, p_lo: int) -> tuple[int, int, int] | None:
        """The key of the kept segment holding order position `p_lo` of `epoch`, the newest first; None if none."""
        for key in reversed(self._segments):
            if key[0] == epoch and key[1] <= p_lo < key[2]:
                return key
        return None

    def stop_reading_ahead(self) -> None:
        """Wait for the segment read ahead, if any, and drop it (a closed loader leaves no thread reading)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.wait()

    def _segment_end(self, epoch: int, p_lo: int, p_cap: int | None) -> int:
        """The end (order position) of the segment that starts at `p_lo` (see `_segment`)."""
        _, offsets, _, starts = self._epoch(epoch)
        w = int(np.searchsorted(starts, p_lo, side="right")) - 1
        w_end = int(np.searchsorted(offsets[starts], int(offsets[p_lo]) + SEGMENT_TOKENS, side="left"))
        p_end = int(starts[min(max(w_end, w + 1), len(starts) - 1)])
        return p_end if p_cap is None else min(p_end, max(int(p_cap), p_lo + 1))

    def _read_segment(self, epoch: int, p_lo: int, p_end: int) -> np.ndarray:
        """The verified stream tokens of order positions [p_lo, p_end) of `epoch`, in serving order."""
        order, offsets = self.epoch_layout(epoch)
        samples = order[p_lo:p_end]
        source = self.view.source
        if hasattr(source, "read_stream"):
            tokens = source.read_stream(samples)
        else:  # any TokenSource: its read() gives one verified array per sample
            arrays = source.read(np.unique(samples).tolist())
            tokens = np.concatenate([np.asarray(arrays[int(x)]) for x in samples.tolist()])
        want = int(offsets[p_end] - offsets[p_lo])
        if len(tokens) != want:
            raise LoaderError(
                f"run view {self.view.run_view_id}: the documents at order positions {p_lo}..{p_end - 1} of epoch "
                f"{epoch} hold {len(tokens)} tokens, their n_tokens in the view say {want}"
            )
        return tokens

    def _read_ahead(self, rank: int, world_size: int, last_step: int | None) -> None:
        """Start reading, on a thread, the segment after the newest one: the one holding the first tokens past its
        end that this rank will read (the order is known, so the loader reads what it serves next while it packs
        what it serves now; the row-group decode and sha256 release the GIL). Nothing past `last_step` (a worker
        skips ahead there) or the schedule's end; at most one read ahead, none while one is running."""
        if not self.read_ahead or self._ahead is not None or not self._segments:
            return
        epoch, _, p_end = next(reversed(self._segments))
        offsets = self.epoch_layout(epoch)[1]
        sched, seq_len = self.schedule, self.seq_len
        g = sched.global_batch_size
        _, hi = rank_slice(g, world_size, rank)
        # the first step of the epoch whose window for this rank ends past the segment's end
        past = int(offsets[p_end]) - 1 - hi * seq_len
        j = 0 if past < 0 else past // (g * seq_len) + 1
        step = epoch * sched.steps_per_epoch + min(j, sched.steps_per_epoch)
        total = sched.total_steps
        if (last_step is not None and step > last_step) or (total is not None and step >= total):
            return
        seg_epoch = epoch
        epoch, _, t_lo, t_end, p_lo, p_hi = self.stream_window(step, rank, world_size)
        if epoch == seg_epoch:
            p_lo = max(p_lo, p_end)  # a window straddling the segment's end reads on from there
        if t_end <= t_lo or p_lo >= p_hi or self._kept_segment(epoch, p_lo) is not None:
            return
        p_cap = None if last_step is None else max(p_hi, self.stream_window(last_step, rank, world_size)[5])
        self._ahead = _SegmentRead((epoch, p_lo, self._segment_end(epoch, p_lo, p_cap)), self._read_segment)

    def _collate(
        self, step, epoch, rank, world_size, seqs, samples, packed: PackedBatch, n_steps: int = 1
    ) -> list[dict[str, Any]]:
        piece_samples = samples[packed.piece_document] if len(samples) else np.zeros(0, np.int64)
        bounds = np.searchsorted(packed.piece_sequence, np.arange(len(seqs) + 1))
        pieces = Pieces(self._doc_ids, piece_samples, packed.piece_start, packed.piece_end, bounds)
        cu = packed.cu_seqlens
        per = len(seqs) // n_steps
        span = per * self.seq_len
        cut = np.searchsorted(cu, np.arange(n_steps + 1, dtype=np.int64) * span).tolist()
        max_seqlen = np.maximum.reduceat(np.diff(cu), cut[:-1]).tolist()  # every step has >= 1 segment
        names = ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids")
        # each field one tensor [n_steps, per, seq_len] over the packed block, each step's a view of it (one
        # from_numpy and one unbind per field, not one from_numpy per field and step)
        shape = (n_steps, per, self.seq_len)
        fields = [torch.from_numpy(getattr(packed, f).reshape(shape)).unbind(0) for f in names]
        index = torch.arange(seqs.start, seqs.stop, dtype=torch.int64).view(n_steps, per).unbind(0)
        out = []
        for j in range(n_steps):
            a, b = cut[j], cut[j + 1]
            batch = dict(zip(names, [f[j] for f in fields], strict=True))
            batch.update(
                {
                    "cu_seqlens": torch.from_numpy(cu[a : b + 1] - np.int32(j * span)),
                    "max_seqlen": max_seqlen[j],
                    "sequence_index": index[j],
                    "run_view_id": self.view.run_view_id,
                    "step": int(step) + j,
                    "epoch": int(epoch),
                    "rank": int(rank),
                    "world_size": int(world_size),
                    "documents": AuditSpans(pieces, j * per, (j + 1) * per),
                    "sample_indices": SampleIndices(pieces, j * per, (j + 1) * per),
                }
            )
            out.append(batch)
        return out


class _Delivery:
    """The iterator `iter(RunViewLoader)` returns: hands each batch to the training loop, checks its order,
    pins it, meters the wait. A class, not a generator: its `next()` is the data-wait every training step
    pays, and right after a step (caches cold) a generator frame plus a locked meter cost ~100 us more than
    this on a 2-core VM. The stream starts on the first `next()` (so a `load_state_dict` before it counts);
    `close()` (or the end, an error, or collection) stops the read-ahead."""

    def __init__(self, loader: RunViewLoader) -> None:
        self._loader = loader
        self._it: Iterator[dict[str, Any]] | None = None
        self._retire: Callable[[Any], None] | None = None  # the read-ahead's retire, when there is one
        self._closed = False
        # the last two batches handed out: when the third goes out, the training loop has let go of the first
        # (it rebinds its batch variable only after next() returns), which then goes back to the read-ahead
        # thread to be freed there instead of inside the loop's next()
        self._held: collections.deque = collections.deque()

    def __iter__(self) -> _Delivery:
        return self

    def __next__(self) -> dict[str, Any]:
        it = self._it
        if it is None:
            if self._closed:
                raise StopIteration
            it = self._it = self._loader._stream()
            self._retire = getattr(it, "retire", None)
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except BaseException:  # the end, or the read failed: nothing more comes from this stream
            self.close()
            raise
        wait = time.perf_counter() - t0
        loader = self._loader
        if batch["step"] != loader._cursor:
            self.close()
            raise LoaderError(
                f"batch of global step {batch['step']} arrived while the cursor is at "
                f"{loader._cursor}: the DataLoader delivered out of order"
            )
        loader._cursor = batch["step"] + 1
        if loader.pin_memory:
            batch = pin_batch(batch)
        loader.meter.batch_delivered(batch["input_ids"].numel(), wait)
        if loader.log_every and loader._cursor % loader.log_every == 0:
            (loader.on_metrics or _log_metrics)(loader.metrics())
        if self._retire is not None:
            held = self._held
            held.append(batch)
            if len(held) > 2:
                self._retire(held.popleft())
        return batch

    def close(self) -> None:
        """Stop reading ahead (the prefetch thread, DataLoader workers); later `next()` calls end."""
        self._closed = True
        self._held.clear()
        self._retire = None
        it, self._it = self._it, None
        if it is None:
            return
        close = getattr(it, "close", None)
        if close is not None:
            close()
        if self._loader.prefetcher is it:
            self._loader.prefetcher = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing left to stop
            pass


# --- state ------------------------------------------------------------------------------------------------


def fingerprint_sha256(fingerprint: Mapping) -> str:
    """sha256 of the canonical JSON of a fingerprint."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def make_state(plan: BatchPlan, global_step: int) -> dict:
    """The loader state at a global cursor (global steps consumed)."""
    fp = plan.fingerprint()
    return {
        "format": STATE_FORMAT,
        "state_version": STATE_VERSION,
        "run_view_id": plan.view.run_view_id,
        "global_step": int(global_step),
        "epoch": int(global_step) // plan.schedule.steps_per_epoch,
        "fingerprint": fp,
        "fingerprint_sha256": fingerprint_sha256(fp),
    }


def check_state(plan: BatchPlan, state: Mapping) -> int:
    """The global cursor of `state` after checking it belongs to `plan`; named StateMismatch errors otherwise."""
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise MalformedState(f"not a tokenlake loader state (format {found!r}, expected {STATE_FORMAT!r})")
    fp, want = state.get("fingerprint"), plan.fingerprint()
    if not isinstance(fp, Mapping) or not isinstance(state.get("global_step"), int):
        raise MalformedState("loader state lacks a fingerprint mapping or an integer global_step")
    for where, version in (("state", state.get("state_version")), ("fingerprint", fp.get("state_version"))):
        if version != STATE_VERSION:
            raise StateVersionMismatch(
                f"loader state version {version!r} (in its {where}) is not {STATE_VERSION}; "
                f"it was written by another loader version: resume with that version"
            )
    if fp.get("order") != ORDER_VERSION:
        raise StateVersionMismatch(
            f"loader state was saved with order {fp.get('order')!r}, this loader serves "
            f"{ORDER_VERSION!r}: the global batches would differ"
        )
    if state.get("run_view_id") != plan.view.run_view_id:
        raise RunViewMismatch(
            f"loader state belongs to run view {state.get('run_view_id')!r}, this loader serves "
            f"{plan.view.run_view_id!r}; open the run view the checkpoint was trained on"
        )
    if fp.get("manifest_sha256") != want["manifest_sha256"]:
        raise ManifestMismatch(
            f"loader state has manifest sha256 {fp.get('manifest_sha256')!r}, run view "
            f"{plan.view.run_view_id} has {want['manifest_sha256']!r}"
        )
    if fp.get("tokenizer_id") != want["tokenizer_id"]:
        raise TokenizerMismatch(
            f"loader state was saved with tokenizer {fp.get('tokenizer_id')!r}, this run view "
            f"uses {want['tokenizer_id']!r}"
        )
    if fp.get("seed") != want["seed"]:
        raise SeedMismatch(
            f"loader state was saved with seed {fp.get('seed')!r}, this loader uses {want['seed']}; "
            f"pass seed={fp.get('seed')!r} to resume that run"
        )
    if fp.get("packing") != want["packing"]:
        raise PackingMismatch(
            f"loader state was saved with packing {fp.get('packing')!r}, this loader packs {want['packing']!r}"
        )
    if fp.get("global_batch_size") != want["global_batch_size"]:
        raise GlobalBatchSizeMismatch(
            f"loader state was saved with global batch size {fp.get('global_batch_size')!r}, "
            f"this loader uses {want['global_batch_size']}: global batch k would hold other "
            f"sequences; keep the global batch size and change only the world size"
        )
    step = state["global_step"]
    total = plan.schedule.total_steps
    if step < 0 or (total is not None and step > total):
        raise MalformedState(f"loader state cursor {step} is outside 0..{total}")
    return step


# --- torch ------------------------------------------------------------------------------------------------


def loader_chunks(
    plan: BatchPlan, start: int, stop: int | None, world_size: int = 1, min_steps: int = WORKER_CHUNK_STEPS
) -> Iterator[range]:
    """The chunks of global steps a RunViewLoader's DataLoader workers take in turn from `start` (chunk c goes to
    worker c mod num_workers)."""
    per_step = plan.global_batch_size // world_size * plan.seq_len
    max_steps = max(min_steps, WORKER_CHUNK_TOKENS // per_step)
    return plan.worker_chunks(start, stop, min_steps, max_steps, WORKER_CHUNK_WINDOWS)


def _run_limit(plan: BatchPlan) -> int:
    """Steps one vectorised read and packing pass takes at most (RUN_STEPS, RUN_TOKENS; world size 1)."""
    return max(1, min(RUN_STEPS, RUN_TOKENS // (plan.global_batch_size * plan.seq_len)))


def keep_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """DataLoader collate_fn for RunViewDataset: batches are already collated (the default one would turn the
    audit tuples into lists)."""
    return batch


def share_streams(chunk: list[dict[str, Any]]) -> torch.Tensor:
    """The stream tokens of a worker's compact reads moved into one shared-memory byte tensor, each read's
    "stream" replaced by (start, stop, dtype) into it: the DataLoader passes a tensor's storage as a file
    descriptor, where numpy arrays go through its pipe pickled (64 KB reads into a BytesIO and a copy out: 2.5
    ns a token of the main process's CPU on the loader bench, a quarter of what assembling costs it)."""
    sizes = [c["stream"].nbytes for c in chunk]
    buf = torch.empty(sum(sizes), dtype=torch.uint8)
    flat = buf.numpy()
    at = 0
    for c, n in zip(chunk, sizes, strict=True):
        stream = c["stream"]
        flat[at : at + n] = np.ascontiguousarray(stream).view(np.uint8)
        c["stream"] = (at, at + n, stream.dtype.str)
        at += n
    return buf.share_memory_()


def unshare_streams(chunk: list[dict[str, Any]], shared: torch.Tensor) -> None:
    """Undo `share_streams` in the receiving process: each read's "stream" a read-only view of the shared tensor."""
    flat = shared.numpy()
    flat.flags.writeable = False
    for c in chunk:
        a, b, dtype = c["stream"]
        c["stream"] = flat[a:b].view(np.dtype(dtype))


def _assembled(plan: BatchPlan, batches: Iterator[dict[str, Any]], readers: dict) -> Iterator[dict[str, Any]]:
    try:
        for b in batches:
            if "chunk" in b:
                if b.get("reader") is not None:
                    readers[b["worker"]] = b["reader"]
                unshare_streams(b["chunk"], b["streams"])
                for c in b["chunk"]:
                    yield from plan.assemble_steps(c)
                continue
            if "stream" not in b:
                yield b
                continue
            if b.get("reader") is not None:
                readers[b["worker"]] = b["reader"]
            yield plan.assemble(b)
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


_SUMMED = (
    "fetches",
    "fetch_bytes",
    "fetch_seconds",
    "retries",
    "cache_hits",
    "cache_misses",
    "corrupt_refetched",
    "decode_seconds",
    "footer_reads",
)


def merge_reader_summaries(readers: list[dict]) -> dict:
    """Reader counters of several processes summed; latency percentiles: the worst process's (an upper bound)."""
    out: dict[str, Any] = {k: sum(r.get(k, 0) for r in readers) for k in _SUMMED}
    hits, misses = out["cache_hits"], out["cache_misses"]
    out["cache_hit_rate"] = hits / (hits + misses) if hits + misses else None
    for q in ("fetch_latency_p50", "fetch_latency_p95", "fetch_latency_p99"):
        vals = [r[q] for r in readers if r.get(q) is not None]
        out[q] = max(vals) if vals else None
    out["peak_readahead_bytes"] = max([r.get("peak_readahead_bytes", 0) for r in readers], default=0)
    return out


def _log_metrics(m: dict) -> None:
    logging.getLogger("loader").info("loader metrics %s", json.dumps(m, sort_keys=True, default=str))


def _accelerator_available() -> bool:
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        return bool(acc.is_available())
    return torch.cuda.is_available()


def pin_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with every tensor in page-locked memory (for asynchronous host-to-device copies)."""
    return {k: v.pin_memory() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


class RunViewDataset(IterableDataset):
    """This rank's batches of consecutive global steps from the cursor on (use with DataLoader(batch_size=None))."""

    def __init__(
        self,
        view: RunView,
        global_batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        seed: int | None = None,
        seq_len: int | None = None,
        cross_document_attention: str | None = None,
        max_steps: int | None = None,
        epochs: int | None | str = "manifest",
    ):
        """`max_steps`: stop before this global step (besides the manifest's epoch limit)."""
        super().__init__()
        self.plan = BatchPlan(
            view,
            global_batch_size,
            seed=seed,
            seq_len=seq_len,
            cross_document_attention=cross_document_attention,
            epochs=epochs,
        )
        self.rank, self.world_size = resolve_rank(rank, world_size)
        rank_slice(self.plan.global_batch_size, self.world_size, self.rank)  # BadWorldSize now, not mid-run
        self.max_steps = max_steps
        self._cursor = 0  # next global step (main-process semantics)
        self._worker: dict | None = None  # {"id", "num_workers", "next_step"} inside a DataLoader worker
        self.compact = False  # workers yield BatchPlan.read() results (RunViewLoader assembles them)
        self.chunk = 1  # with `compact`: a worker hands over this many consecutive steps as one item
        self.readahead = None  # the active loader.storage.Readahead, when the source reads through a cache

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["readahead"] = None  # threads stay in the process that started them
        return state

    @property
    def stop_step(self) -> int | None:
        """Global step the iteration stops before (None: unbounded)."""
        bounds = [b for b in (self.plan.schedule.total_steps, self.max_steps) if b is not None]
        return min(bounds) if bounds else None

    def _steps(self) -> Iterator[int]:
        info = get_worker_info()
        n, wid = (info.num_workers, info.id) if info is not None else (1, 0)
        w = self._worker
        if w is not None and w.get("id") == wid and w.get("num_workers") == n:
            steps = range(int(w["next_step"]), self.stop_step if self.stop_step is not None else 2**62, n)
        else:
            steps = worker_steps(self._cursor, self.stop_step, n, wid)
        for k in steps:
            if info is not None:
                self._worker = {"id": wid, "num_workers": n, "next_step": k + n}
            self._cursor = k + 1
            yield k

    def _chunks(self) -> Iterator[list[int]]:
        """This DataLoader worker's chunks: the runs of consecutive global steps from the cursor that
        `BatchPlan.worker_chunks` cuts (whole block windows, at least `chunk` steps), chunk c going to worker
        c mod n (the round-robin order the DataLoader collects items in, so the chunks arrive in global order;
        one item per chunk cuts the per-item cost of the worker queue)."""
        info = get_worker_info()
        n, wid = (info.num_workers, info.id) if info is not None else (1, 0)
        for c, steps in enumerate(loader_chunks(self.plan, self._cursor, self.stop_step, self.world_size, self.chunk)):
            if c % n == wid:
                yield list(steps)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # RunViewLoader sets `compact` for its DataLoader workers: they read and verify, the main process
        # assembles (pickling 2 bytes per token instead of 40 in five int64 tensors through shared memory)
        compact = self.compact and get_worker_info() is not None
        if compact and self.chunk > 1:
            yield from self._iter_chunks()
            return
        readahead = self._readahead()
        if not compact and get_worker_info() is None:
            yield from self._iter_runs(readahead)
            return
        try:
            for k in self._steps():
                if readahead is not None:
                    readahead.advance(k)
                if compact:
                    batch = self.plan.read(k, self.rank, self.world_size)
                    batch["reader"], batch["worker"] = self.reader_summary(disk=False), get_worker_info().id
                    yield batch
                else:
                    yield self.plan.batch(k, self.rank, self.world_size)
        finally:
            self._stop_reading(readahead)

    def _iter_runs(self, readahead) -> Iterator[dict[str, Any]]:
        """In the main process: runs of up to RUN_STEPS consecutive steps read, verified and packed at once
        (world size 1; one step at a time otherwise), yielded one batch at a time."""
        stop = self.stop_step
        try:
            k = self._cursor
            limit = _run_limit(self.plan)
            while stop is None or k < stop:
                n = self.plan.run_length(k, self.world_size, limit, stop)
                if readahead is not None:
                    readahead.advance(k)
                if n == 1:
                    run = [self.plan.batch(k, self.rank, self.world_size)]
                else:
                    run = self.plan.batches(k, n, self.rank, self.world_size)
                for batch in run:
                    self._cursor = batch["step"] + 1
                    yield batch
                k += n
        finally:
            self._stop_reading(readahead)

    def _iter_chunks(self) -> Iterator[dict[str, Any]]:
        """Inside a DataLoader worker: {"chunk": [compact batches of this worker's next chunk], "reader", "worker"}."""
        readahead = self._readahead(chunked=True)
        wid = get_worker_info().id
        limit = _run_limit(self.plan)
        try:
            for steps in self._chunks():
                out = []
                k = steps[0]
                while k <= steps[-1]:
                    n = self.plan.run_length(k, self.world_size, min(limit, steps[-1] + 1 - k))
                    if readahead is not None:
                        readahead.advance(k)
                    out.append(self.plan.read(k, self.rank, self.world_size, n, last_step=steps[-1]))
                    k += n
                self._cursor = steps[-1] + 1
                shared = share_streams(out)
                yield {"chunk": out, "streams": shared, "reader": self.reader_summary(disk=False), "worker": wid}
        finally:
            self._stop_reading(readahead)

    def _stop_reading(self, readahead) -> None:
        """Stop this reader's threads: the row-group read-ahead (`_readahead`), then the segment read ahead."""
        if readahead is not None:
            readahead.close()
        self.plan.stop_reading_ahead()

    def _readahead(self, chunked: bool = False):
        """A loader.storage.Readahead over this worker's future steps, when the source reads through a cache."""
        source = self.plan.view.source
        config = source.readahead_config() if hasattr(source, "readahead_config") else None
        if config is None:
            return None
        from loader.storage import Readahead

        info = get_worker_info()
        n, wid = (info.num_workers, info.id) if info is not None else (1, 0)
        w = self._worker
        first = int(w["next_step"]) if w is not None and w.get("id") == wid else self._cursor + wid
        stop = self.stop_step

        def future():
            if chunked:
                for steps in self._chunks():
                    for k in steps:
                        yield k, source.keys_of(self.plan.samples_needed(k, self.rank, self.world_size))
                return
            k = first
            while stop is None or k < stop:
                yield k, source.keys_of(self.plan.samples_needed(k, self.rank, self.world_size))
                k += n

        self.readahead = Readahead(future(), source.fetch_to_cache, config[0], config[1])
        return self.readahead

    def reader_summary(self, disk: bool = True) -> dict | None:
        """This process's row-group reader counters (loader.storage.RowGroupReader.summary), if any."""
        reader = getattr(self.plan.view.source, "_reader", None)
        if reader is None:
            return None
        out = reader.summary(disk=disk)
        ra = self.readahead
        if ra is not None:
            out.update(queue_depth=ra.depth(), readahead_bytes=ra.ahead_bytes, peak_readahead_bytes=ra.peak_ahead_bytes)
        return out

    def state_dict(self) -> dict:
        """The cursor (plus this worker's stride position inside a DataLoader worker)."""
        state = make_state(self.plan, self._cursor)
        if self._worker is not None and get_worker_info() is not None:
            state["worker"] = dict(self._worker)
        return state

    def load_state_dict(self, state: Mapping) -> None:
        """Resume at the state's cursor; raises a StateMismatch subclass if the state is not for this data."""
        self._cursor = check_state(self.plan, state)
        self._worker = dict(state["worker"]) if isinstance(state.get("worker"), Mapping) else None


class RunViewLoader:
    """The training loop's iterator over this rank's batches, with the one global cursor as its state."""

    def __init__(
        self,
        view: RunView,
        global_batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        prefetch: int = DEFAULT_PREFETCH,
        pin_memory: bool = False,
        seed: int | None = None,
        seq_len: int | None = None,
        cross_document_attention: str | None = None,
        max_steps: int | None = None,
        epochs: int | None | str = "manifest",
        metrics: Any = None,
        multiprocessing_context: str | None = None,
        log_every: int = 0,
        on_metrics: Callable[[dict], None] | None = None,
    ):
        """`num_workers`: DataLoader worker processes; `prefetch`: batches a background thread reads ahead
        (loader.prefetch.Prefetcher, 0 = none; the thread starts once the loop shows it works between batches:
        while the loop takes batches faster than a thread makes them, they are built in the loop's own thread,
        which is faster under the GIL; `metrics()["readahead"]`);
        `pin_memory`: tensors in page-locked host memory (when an accelerator is present; a no-op on CPU-only
        machines); `metrics`: a loader.metrics.LoaderMetrics to record into (default: a new one; `metrics()`
        reports); every `log_every` steps `on_metrics(metrics())` is called (default: logged at INFO on the
        "loader" logger)."""
        metrics = LoaderMetrics() if metrics is None else metrics
        if hasattr(view.source, "on_read"):
            # a copy of the view whose reader reports row-group read latency to `metrics` (reads in this process
            # only: DataLoader workers read with their own copy, so their latency is not seen here)
            view = copy.copy(view)
            view.source = dataclasses.replace(view.source, on_read=metrics.record_read)
        if num_workers < 0 or prefetch < 0:
            raise ValueError(f"num_workers and prefetch must be >= 0, got {num_workers}, {prefetch}")
        self.dataset = RunViewDataset(
            view,
            global_batch_size,
            rank=rank,
            world_size=world_size,
            seed=seed,
            seq_len=seq_len,
            cross_document_attention=cross_document_attention,
            max_steps=max_steps,
            epochs=epochs,
        )
        self.num_workers, self.prefetch, self.meter = num_workers, prefetch, metrics
        self.log_every, self.on_metrics = int(log_every), on_metrics
        self._worker_readers: dict[int, dict] = {}  # the latest reader counters each DataLoader worker sent
        self.pin_memory = bool(pin_memory) and _accelerator_available()
        self.multiprocessing_context = multiprocessing_context
        self._cursor = 0
        # the active read-ahead queue while iterating (its depth() and blocked_puts show backpressure), else None
        self.prefetcher = None

    @property
    def plan(self) -> BatchPlan:
        return self.dataset.plan

    @property
    def global_step(self) -> int:
        """Global steps consumed so far: the cursor."""
        return self._cursor

    def _batches(self) -> Iterator[dict[str, Any]]:
        self.dataset._cursor, self.dataset._worker = self._cursor, None
        self.dataset.compact = self.num_workers > 0
        self.dataset.chunk = WORKER_CHUNK_STEPS
        if self.num_workers == 0:
            return iter(self.dataset)
        return iter(
            torch.utils.data.DataLoader(
                self.dataset,
                batch_size=None,
                num_workers=self.num_workers,
                collate_fn=keep_batch,
                multiprocessing_context=self.multiprocessing_context,
            )
        )

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return _Delivery(self)

    def _stream(self) -> Iterator[dict[str, Any]]:
        """The batches from the cursor on, assembled and read ahead (what `_Delivery` hands out)."""
        it = self._batches()
        if self.num_workers:  # workers hand over compact batches; assembling them is the read-ahead thread's job
            it = _assembled(self.plan, it, self._worker_readers)
        if self.prefetch:
            from loader.prefetch import Prefetcher

            it = self.prefetcher = Prefetcher(it, self.prefetch, adaptive=True)
        return it

    def metrics(self, gather: bool = False) -> dict:
        """This rank's loader metrics: tokens/s, data-wait fraction, batches and tokens; row-group reads (this
        process and every DataLoader worker): cache hit rate, fetch latency p50/p95/p99 (s), decode seconds,
        retries, corrupt cached copies re-fetched, bytes fetched, queue depth, cache bytes on disk.
        `gather=True` (collective, every rank at once) adds the straggler view over torch.distributed ranks:
        slowest rank's tokens/s over the median's."""
        m = self.meter.summary()
        out = {
            "rank": self.dataset.rank,
            "world_size": self.dataset.world_size,
            "global_step": self._cursor,
            "batches": m["batches"],
            "tokens": m["tokens"],
            "tokens_per_s": m["tokens_per_second"],
            "data_wait_fraction": m["data_wait_fraction"],
            "data_wait_seconds": m["data_wait_seconds"],
        }
        readers = [r for r in (self.dataset.reader_summary(disk=False), *self._worker_readers.values()) if r]
        out.update(merge_reader_summaries(readers))
        pf = self.prefetcher
        depth = pf.depth() if pf is not None else 0
        out["queue_depth"] = depth + sum(int(r.get("queue_depth", 0)) for r in readers)
        # the read-ahead thread, or batches built in the training loop's thread while it takes them faster than
        # the thread makes them (loader.prefetch, adaptive)
        out["readahead"] = "off" if pf is None else "inline" if pf.inline else "thread"
        out["readahead_switches"] = pf.switches if pf is not None else 0
        storage = getattr(self.plan.view.source, "storage", None)
        if storage is not None and storage.cache_dir:
            from loader.storage import NodeCache

            out["cache_bytes"] = NodeCache(storage.cache_dir, storage.cache_bytes).bytes_used()
            out["cache_budget_bytes"] = storage.cache_bytes
        if gather and torch.distributed.is_available() and torch.distributed.is_initialized():
            rates = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(rates, out["tokens_per_s"])
            known = sorted(r for r in rates if r)
            if known:
                median = known[len(known) // 2] if len(known) % 2 else sum(known[len(known) // 2 - 1 :][:2]) / 2
                out["rank_tokens_per_s"] = rates
                out["straggler_ratio"] = known[0] / median  # slowest rank vs the median (1.0: none)
        return out

    def state_dict(self) -> dict:
        """{format, state_version, run_view_id, global_step, epoch, fingerprint, fingerprint_sha256}."""
        return make_state(self.plan, self._cursor)

    def load_state_dict(self, state: Mapping) -> None:
        """Continue at the state's cursor (any world size dividing the global batch size)."""
        self._cursor = check_state(self.plan, state)
