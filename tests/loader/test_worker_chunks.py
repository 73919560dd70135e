"""DataLoader workers take whole block windows: `BatchPlan.worker_chunks` cuts the step stream where a window of
row groups begins, so each worker decodes the row groups of its own windows instead of every worker decoding
every row group (with fixed 8-step chunks, 2 workers read twice the row groups one process reads)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from loader import RunViewLoader, in_memory_view
from loader.order import BLOCKS_PER_WINDOW, chunk_blocks, epoch_windows
from tests.loader.views import gpt2_docs, run, same_global

SEQ = 64


def memory_plan(n_docs: int = 400, block_size: int = 4, global_batch: int = 2):
    docs = [gpt2_docs()[i % len(gpt2_docs())] for i in range(n_docs)]
    view = in_memory_view(docs, seq_len=SEQ, eos_id=50256, block_size=block_size, epochs=3)
    return RunViewLoader(view, global_batch).plan


def test_window_starts_cut_the_order_into_windows_of_disjoint_blocks():
    blocks = chunk_blocks(1000, 7)
    order, starts = epoch_windows(blocks, "ab" * 32, 3, 1)
    segments = np.split(blocks[order], starts[1:])
    sets = [set(seg.tolist()) for seg in segments]
    assert starts[0] == 0 and len(segments) == -(-len(np.unique(blocks)) // BLOCKS_PER_WINDOW)
    assert all(len(s) == BLOCKS_PER_WINDOW for s in sets[:-1]) and 0 < len(sets[-1]) <= BLOCKS_PER_WINDOW
    assert sum(len(s) for s in sets) == len(set().union(*sets)), "a block belongs to one window"


@pytest.mark.parametrize(
    ("start", "stop", "min_steps", "max_steps", "windows"), [(0, None, 3, 40, 1), (5, 200, 8, 12, 2)]
)
def test_chunks_tile_the_steps_and_end_at_window_starts(start, stop, min_steps, max_steps, windows):
    plan = memory_plan()
    spe = plan.schedule.steps_per_epoch
    chunks = plan.worker_chunks(start, stop, min_steps, max_steps, windows)
    got = [next(chunks) for _ in range(30)] if stop is None else list(chunks)
    assert got[0].start == start and all(a.stop == b.start for a, b in zip(got, got[1:], strict=False))
    if stop is not None:
        assert got[-1].stop == stop
    for c in got:
        epoch = c.start // spe
        assert c.stop <= (epoch + 1) * spe, "a chunk never crosses an epoch"
        assert len(c) <= max_steps
        starts = epoch * spe + plan._epoch(epoch)[2]
        ends_at_window = c.stop in starts.tolist()
        if c.stop not in (stop, (epoch + 1) * spe) and len(c) < max_steps:
            assert ends_at_window, c
            assert len(c) >= min_steps
            # it holds `windows` window starts after its first step (or more, when windows were merged to min_steps)
            assert int(np.sum((starts > c.start) & (starts <= c.stop))) >= windows
    # from any chunk boundary on, the same chunks (every worker cuts them alike after a resume)
    k = got[3].start
    again = plan.worker_chunks(k, stop, min_steps, max_steps, windows)
    assert [next(again) for _ in range(5)] == got[3:8]


@pytest.fixture(scope="module")
def wide_view(tmp_path_factory):
    """A real published view of 240 documents in row groups of 8: 30 row groups, 4 block windows an epoch."""
    from loader import open_run_view
    from tests.run_view import builders

    home = tmp_path_factory.mktemp("chunks")
    old = os.environ.get("TOKENLAKE_HOME")
    os.environ["TOKENLAKE_HOME"] = str(home)
    try:
        rv = builders.published_view(n_docs=240, seq_len=SEQ, docs_per_row_group=8, name="chunks")
        from iceberg_catalog import CatalogConfig, Lakehouse

        return lambda: open_run_view(rv, catalog=Lakehouse(CatalogConfig.embedded(home)))
    finally:
        if old is None:
            os.environ.pop("TOKENLAKE_HOME", None)
        else:
            os.environ["TOKENLAKE_HOME"] = old


def test_two_workers_read_each_row_group_about_once_and_serve_the_same_batches(wide_view):
    batch = 4  # 256 tokens a step: a window of 8 row groups spans ~37 steps, more than WORKER_CHUNK_STEPS
    one = RunViewLoader(wide_view(), batch)
    steps = one.plan.schedule.steps_per_epoch
    one = RunViewLoader(wide_view(), batch, max_steps=steps)
    ref = run(one)
    row_groups = one.metrics()["fetches"]
    two = RunViewLoader(wide_view(), batch, num_workers=2, max_steps=steps, multiprocessing_context="fork")
    got = run(two)
    assert len(got) == len(ref) == steps and all(same_global(a, b) for a, b in zip(got, ref, strict=True))
    fetches = two.metrics()["fetches"]
    # fixed 8-step chunks alternating between the workers made each of them decode every window: ~2x; stream
    # segments that ran past a worker's chunk into the next worker's windows: 45-46 of 30 (now 31)
    assert row_groups >= 30 and fetches <= 1.2 * row_groups, (fetches, row_groups)


@pytest.mark.parametrize("start", [0, 37])
def test_the_first_batch_reads_only_the_row_groups_of_its_own_documents(wide_view, start):
    """A start or a resume waits for its first batch's documents only: the stream segment of the first read ends
    with that read (later ones span whole block windows of >= SEGMENT_TOKENS); it read every row group of an
    epoch (30 here) for rank 3 of 4's first batch of one 64-token sequence."""
    from loader import make_state

    # no batch prefetch thread: once the loop has taken a batch it may start building the next one (adaptive), and
    # under load it did before `metrics()` was read (3 fetches, 1 of ~7 full runs)
    data = RunViewLoader(wide_view(), 4, rank=3, world_size=4, prefetch=0)
    data.reader.read_ahead = False  # it would go on reading the next segment on its thread: counted here too
    if start:
        data.load_state_dict(make_state(data.plan, start))
    first = next(iter(data))
    source = data.plan.view.source
    own = np.unique(source.key[data.plan.samples_needed(start, 3, 4)])
    assert first["step"] == start and data.metrics()["fetches"] == len(own) <= 2


def test_shared_streams_round_trip_every_token_dtype_and_an_empty_read():
    """A worker's compact reads hand their streams over as one shared-memory tensor (a file descriptor, not
    pickled bytes); the receiving side gets the same tokens, read-only."""
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # noqa: F401 - registers torch's reductions (storages as file descriptors)

    from loader.dataset import share_streams, unshare_streams

    streams = [np.arange(5, dtype=np.uint16), np.zeros(0, np.uint16), np.arange(70_000, 70_007, dtype=np.uint32)]
    chunk = [{"stream": s[1:] if len(s) else s, "t_lo": i} for i, s in enumerate(streams)]
    shared = share_streams(chunk)
    assert shared.is_shared() and all(isinstance(c["stream"], tuple) for c in chunk)
    chunk, shared = pickle.loads(ForkingPickler.dumps((chunk, shared)))
    unshare_streams(chunk, shared)
    for c, s in zip(chunk, streams, strict=True):
        want = s[1:] if len(s) else s
        assert c["stream"].dtype == want.dtype and np.array_equal(c["stream"], want)
        assert not c["stream"].flags.writeable
