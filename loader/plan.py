"""The batch plan: which tokens every rank serves at every global step of a run view, and how they are packed.

Pure given the view: (view, global batch size G, seed, packing) -> the stream window any rank reads at any global
step (`loader.order` has the arithmetic and the drop/pad rule), the runs of steps DataLoader workers take, where a
stream segment ends and which one a reader needs next; and the batch dicts of tokens once read
(`assemble_steps`). No threads and no I/O here: reading the tokens, and reading ahead, is `loader.read_ahead`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

from loader.order import Schedule, epoch_windows, rank_slice
from loader.packing import BlockPool, PackedBatch, check_policy, pack_batch, sequence_pieces, stream_offsets
from loader.spans import AuditSpans, Pieces, SampleIndices
from loader.view import RunView

_EPOCHS_CACHED = 2
# a stream segment (`BatchPlan.segment_end`): whole block windows, at least SEGMENT_TOKENS tokens (a window of row
# groups of 4 documents holds ~500 tokens: one segment per window made a read of 8 steps build ~35)
SEGMENT_TOKENS = 1 << 18
# one per process, shared by every plan (a new loader reuses the blocks an old one's dropped batches left)
BLOCK_POOL = BlockPool()


class BatchPlan:
    """Which tokens every rank serves at every global step of a run view: pure given the view."""

    def __init__(
        self,
        view: RunView,
        global_batch_size: int,
        *,
        epochs: int | None | str = "manifest",
        seed: int | None = None,
        seq_len: int | None = None,
        cross_document_attention: str | None = None,
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
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()
        self._doc_ids = np.asarray(view.doc_ids, dtype=object)
        self._pool = BLOCK_POOL  # packed blocks reused once the batches made from them are dropped

    @property
    def global_batch_size(self) -> int:
        return self.schedule.global_batch_size

    @property
    def packing(self) -> dict:
        return {"seq_len": self.seq_len, "eos_id": self.eos_id, "cross_document_attention": self.policy}

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

    def read_window(
        self, step: int, rank: int, world_size: int, n_steps: int, last_step: int | None, first_read: bool
    ) -> tuple[int, range, int, int, int, int, int | None]:
        """(epoch, sequence indices, t_lo, t_end, p_lo, p_hi, p_cap): what a read of a rank's batch (`n_steps`
        consecutive ones) takes from the stream (`stream_window`), and the order position a segment read for it
        ends by (None: where whole windows end, `segment_end`). `last_step`: the last step of the epoch this
        reader serves before it skips ahead (a DataLoader worker's chunk): the segment ends by the documents that
        step needs, instead of reading the next worker's windows. At world size > 1 a reader's first read (a
        start or a resume) reads its own documents only: a rank's batch is 1/W of the stream, and its first one
        need not wait for a whole segment (rank 7 of 8's first batch on the bench's 10,240-row-group view: 560
        row groups -> 40). At world size 1 the segment is served by the next steps anyway, and reading it in two
        parts costs a second gather of its window (steps 8-15 of the bench's prod view: 1.1 -> 2.3-3.0 CPU ms),
        so the first read takes it whole."""
        epoch, seqs, t_lo, t_end, p_lo, p_hi = self.stream_window(step, rank, world_size, n_steps)
        p_cap = None
        if last_step is not None and last_step >= step:
            p_cap = max(p_hi, self.stream_window(last_step, rank, world_size)[5])
        elif first_read and world_size > 1:
            p_cap = p_hi
        return epoch, seqs, t_lo, t_end, p_lo, p_hi, p_cap

    def segment_end(self, epoch: int, p_lo: int, p_cap: int | None) -> int:
        """The end (order position) of the stream segment that starts at `p_lo`: whole block windows from the one
        holding p_lo, at least SEGMENT_TOKENS tokens (views of small row groups have small windows), ending by
        order position `p_cap` when given (what a reader reads before it skips ahead)."""
        _, offsets, _, starts = self._epoch(epoch)
        w = int(np.searchsorted(starts, p_lo, side="right")) - 1
        w_end = int(np.searchsorted(offsets[starts], int(offsets[p_lo]) + SEGMENT_TOKENS, side="left"))
        p_end = int(starts[min(max(w_end, w + 1), len(starts) - 1)])
        return p_end if p_cap is None else min(p_end, max(int(p_cap), p_lo + 1))

    def next_segment(
        self, epoch: int, p_end: int, rank: int, world_size: int, last_step: int | None
    ) -> tuple[int, int, int] | None:
        """(epoch, p_lo, p_end) of the segment after the one ending at order position `p_end` of `epoch`: the one
        holding the first tokens past that end this rank will read. None past `last_step` (a worker skips ahead
        there), past the schedule's end, or when the step that needs them reads nothing new."""
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
            return None
        seg_epoch = epoch
        epoch, _, t_lo, t_end, p_lo, p_hi = self.stream_window(step, rank, world_size)
        if epoch == seg_epoch:
            p_lo = max(p_lo, p_end)  # a window straddling the segment's end reads on from there
        if t_end <= t_lo or p_lo >= p_hi:
            return None
        p_cap = None if last_step is None else max(p_hi, self.stream_window(last_step, rank, world_size)[5])
        return epoch, p_lo, self.segment_end(epoch, p_lo, p_cap)

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
