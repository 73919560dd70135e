"""The loader reads the next stream segment on a thread while it packs the current one (`SegmentReader._read_ahead`):
the same batches as without it, at every world size, rank and across epochs; a corrupt document in a segment read
ahead stops the loader at the same batch as without read-ahead, naming the document; a closed loader leaves no
read running."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import loader
import loader.plan as plan
import loader.read_ahead as read_ahead
from loader import RunViewLoader, in_memory_view
from tests.loader.views import gpt2_docs, run, same_batch

SEQ = 64


class CountingRead(read_ahead._SegmentRead):
    """A segment read ahead, counted when its tokens are used."""

    used = 0

    def result(self):
        out = super().result()
        CountingRead.used += 1
        return out


@pytest.fixture
def small_segments(monkeypatch):
    """Segments of ~300 tokens (a block window at least), so that an epoch of the test view holds several."""
    monkeypatch.setattr(plan, "SEGMENT_TOKENS", 300)
    monkeypatch.setattr(read_ahead, "_SegmentRead", CountingRead)
    CountingRead.used = 0


def view(n_docs: int = 160):
    docs = [gpt2_docs()[i % len(gpt2_docs())] for i in range(n_docs)]
    return in_memory_view(docs, seq_len=SEQ, eos_id=50256, block_size=2, epochs=2)


def batches(rank: int, world: int, ahead: bool, **kw) -> list[dict]:
    data = RunViewLoader(view(), 8, rank=rank, world_size=world, **kw)
    data.reader.read_ahead = ahead
    return run(data)


@pytest.mark.parametrize(("rank", "world"), [(0, 1), (1, 4), (3, 4)])
def test_read_ahead_serves_the_same_batches_over_two_epochs(small_segments, rank, world):
    ref = batches(rank, world, ahead=False)
    assert CountingRead.used == 0
    got = batches(rank, world, ahead=True)
    assert len(got) == len(ref) > 20 and all(same_batch(a, b) for a, b in zip(got, ref, strict=True))
    assert CountingRead.used >= 4, "segments were read ahead and served"


def test_read_ahead_in_dataloader_workers_serves_the_same_batches(small_segments):
    ref = batches(0, 1, ahead=False)
    got = batches(0, 1, ahead=True, num_workers=2, multiprocessing_context="fork")
    assert len(got) == len(ref) and all(same_batch(a, b) for a, b in zip(got, ref, strict=True))


def test_a_corrupt_document_read_ahead_stops_at_the_same_batch_naming_it(small_segments):
    """The read ahead fails on its thread; the error reaches the loader when that segment is needed, not before,
    and names the document, as without read-ahead."""
    steps = {}
    for ahead in (False, True):
        v = view()
        data = RunViewLoader(v, 8)
        victim = v.doc_ids[int(data.plan.epoch_layout(0)[0][-5])]  # served near the end of the first epoch
        v.source.data[victim] = b"\x01\x00" + v.source.data[victim][2:]
        data.reader.read_ahead = ahead
        served = []
        with pytest.raises(loader.ChecksumMismatch, match=victim):
            for b in data:
                served.append(b["step"])
        steps[ahead] = served
    assert steps[True] == steps[False] and len(steps[True]) > 10, steps


def test_a_closed_loader_leaves_no_segment_read_running(small_segments):
    data = RunViewLoader(view(), 8)
    it = iter(data)
    for _ in range(5):
        next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "tokenlake-segment-read"]
    assert data.reader._ahead is None
    assert np.all(np.diff([b["step"] for b in run(RunViewLoader(view(), 8), 3)]) == 1)
