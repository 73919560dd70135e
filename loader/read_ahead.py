"""Reading a plan's stream segments, and reading the next one ahead on a thread while this one is packed.

A `SegmentReader` serves the compact reads of a `loader.plan.BatchPlan` (`read`: a rank's stream tokens, read
and verified, plus where its documents start) from stream segments: whole block windows read once in serving
order, then sliced by every read in them. From its second read on it reads the next segment on a daemon thread
(`_SegmentRead`): the order is known, so the loader reads what it serves next while it packs what it serves now
(the row-group decode and sha256 release the GIL). `stop_reading_ahead` ends that thread's work; a reader pickled
into a DataLoader worker leaves its tokens and threads behind.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from loader.errors import LoaderError
from loader.plan import BatchPlan

# the last segments a reader keeps, so a read straddling two segments finds both
_SEGMENTS_KEPT = 2


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


class SegmentReader:
    """A plan's batches read from its view's token source, one stream segment at a time, the next read ahead."""

    def __init__(self, plan: BatchPlan) -> None:
        self.plan = plan
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

    def read(
        self, step: int, rank: int = 0, world_size: int = 1, n_steps: int = 1, last_step: int | None = None
    ) -> dict[str, Any]:
        """The compact form of a rank's batch (or of `n_steps` consecutive ones, see `BatchPlan.run_length`): its
        stream tokens (read and verified, source dtype) and where the documents start; a few tens of KB a step
        that a DataLoader worker pickles in one piece (`BatchPlan.assemble_steps` expands it). `last_step`: see
        `BatchPlan.read_window`."""
        plan = self.plan
        epoch, seqs, t_lo, t_end, p_lo, p_hi, p_cap = plan.read_window(
            step, rank, world_size, n_steps, last_step, not self._segments
        )
        order, offsets = plan.epoch_layout(epoch)
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

    def batch(self, step: int, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """The batch `rank` of `world_size` serves at global `step`, tokens read and verified."""
        return self.plan.assemble(self.read(step, rank, world_size))

    def batches(self, step: int, n_steps: int, rank: int = 0, world_size: int = 1) -> list[dict[str, Any]]:
        """The batches of global steps step .. step + n_steps - 1 (one read when `run_length` allows it)."""
        return self.plan.assemble_steps(self.read(step, rank, world_size, n_steps))

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
        the segment (`BatchPlan.segment_end`) from the one holding p_lo, read, verified and laid out in serving
        order once, from where the first read in it begins (a resumed run or a DataLoader worker's first step
        reads no earlier documents), then sliced by every read in them. The last `_SEGMENTS_KEPT` segments are
        kept; one read ahead (`_read_ahead`) is taken when it is the segment asked for."""
        key = self._kept_segment(epoch, p_lo)
        if key is not None:
            self._segments.move_to_end(key)
            return key[1], key[2], *self._segments[key]
        key = (epoch, p_lo, self.plan.segment_end(epoch, p_lo, p_cap))
        ahead, self._ahead = self._ahead, None
        tokens = ahead.result() if ahead is not None and ahead.key == key else None
        if tokens is None:
            if ahead is not None:
                ahead.wait()  # the source is read by one thread at a time
            tokens = self._read_segment(*key)
        self._segments[key] = (int(self.plan.epoch_layout(epoch)[1][p_lo]), tokens)
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

    def _read_segment(self, epoch: int, p_lo: int, p_end: int) -> np.ndarray:
        """The verified stream tokens of order positions [p_lo, p_end) of `epoch`, in serving order."""
        plan = self.plan
        order, offsets = plan.epoch_layout(epoch)
        samples = order[p_lo:p_end]
        source = plan.view.source
        if hasattr(source, "read_stream"):
            tokens = source.read_stream(samples)
        else:  # any TokenSource: its read() gives one verified array per sample
            arrays = source.read(np.unique(samples).tolist())
            tokens = np.concatenate([np.asarray(arrays[int(x)]) for x in samples.tolist()])
        want = int(offsets[p_end] - offsets[p_lo])
        if len(tokens) != want:
            raise LoaderError(
                f"run view {plan.view.run_view_id}: the documents at order positions {p_lo}..{p_end - 1} of epoch "
                f"{epoch} hold {len(tokens)} tokens, their n_tokens in the view say {want}"
            )
        return tokens

    def _read_ahead(self, rank: int, world_size: int, last_step: int | None) -> None:
        """Start reading, on a thread, the segment after the newest one (`BatchPlan.next_segment`); at most one
        read ahead, none while one is running, none of a segment already kept."""
        if not self.read_ahead or self._ahead is not None or not self._segments:
            return
        epoch, _, p_end = next(reversed(self._segments))
        key = self.plan.next_segment(epoch, p_end, rank, world_size, last_step)
        if key is None or self._kept_segment(key[0], key[1]) is not None:
            return
        self._ahead = _SegmentRead(key, self._read_segment)
