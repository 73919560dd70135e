"""Serving a run view to PyTorch ranks: the IterableDataset and the training-side loader.

`RunViewDataset` is a torch IterableDataset yielding this rank's slice of consecutive global batches (for
`DataLoader(batch_size=None)`; workers take steps round-robin, the order the DataLoader collects them in), planned by
a `loader.plan.BatchPlan` and read by a `loader.read_ahead.SegmentReader`. `RunViewLoader` is what a training loop
holds: it iterates (optionally through DataLoader workers and a bounded `Prefetcher`), checks that batches arrive
in global-step order, records metrics, and owns the one global cursor; its state is `loader.state`'s.

torchdata's StatefulDataLoader protocol: `RunViewDataset` has `state_dict()` / `load_state_dict()`. In the main
process (num_workers=0) its state is the global cursor. Inside DataLoader worker w of n, its state also
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
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from loader.errors import BadWorldSize, LoaderError
from loader.metrics import LoaderMetrics
from loader.order import rank_slice, worker_steps
from loader.plan import BatchPlan
from loader.read_ahead import SegmentReader
from loader.state import check_state, make_state
from loader.view import RunView

DEFAULT_PREFETCH = 8  # batches read ahead (40 bytes a token each): covers a block window's decode burst (8 row groups)
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


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world_size): explicit arguments, else torch.distributed when initialised, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise BadWorldSize(f"give both rank and world_size or neither, got rank={rank} world_size={world_size}")
    if rank is not None:
        return int(rank), int(world_size)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


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
        max_steps: int | None = None,
        **plan_options: Any,
    ):
        """`max_steps`: stop before this global step (besides the manifest's epoch limit); `plan_options`: the
        BatchPlan's seed, seq_len, cross_document_attention and epochs (defaults: the manifest's)."""
        super().__init__()
        self.plan = BatchPlan(view, global_batch_size, **plan_options)
        self.reader = SegmentReader(self.plan)  # reads the plan's segments, the next one ahead on a thread
        self.rank, self.world_size = resolve_rank(rank, world_size)
        rank_slice(self.plan.global_batch_size, self.world_size, self.rank)  # BadWorldSize now, not mid-run
        self.max_steps = max_steps
        self._cursor = 0  # next global step (main-process semantics)
        self._worker: dict | None = None  # {"id", "num_workers", "next_step"} inside a DataLoader worker
        self.compact = False  # workers yield SegmentReader.read() results (RunViewLoader assembles them)
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
                    batch = self.reader.read(k, self.rank, self.world_size)
                    batch["reader"], batch["worker"] = self.reader_summary(disk=False), get_worker_info().id
                    yield batch
                else:
                    yield self.reader.batch(k, self.rank, self.world_size)
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
                    run = [self.reader.batch(k, self.rank, self.world_size)]
                else:
                    run = self.reader.batches(k, n, self.rank, self.world_size)
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
                    out.append(self.reader.read(k, self.rank, self.world_size, n, last_step=steps[-1]))
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
        self.reader.stop_reading_ahead()

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
        num_workers: int = 0,
        prefetch: int = DEFAULT_PREFETCH,
        pin_memory: bool = False,
        metrics: Any = None,
        multiprocessing_context: str | None = None,
        log_every: int = 0,
        on_metrics: Callable[[dict], None] | None = None,
        **dataset_options: Any,
    ):
        """`dataset_options`: RunViewDataset's rank, world_size, max_steps and the plan's seed, seq_len,
        cross_document_attention and epochs (defaults: the environment's rank, the manifest's values);
        `num_workers`: DataLoader worker processes; `prefetch`: batches a background thread reads ahead
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
        self.dataset = RunViewDataset(view, global_batch_size, **dataset_options)
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
    def reader(self) -> SegmentReader:
        return self.dataset.reader

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
