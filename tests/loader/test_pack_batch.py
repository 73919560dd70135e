"""The vectorised batch packer equals the per-sequence reference packer, sequence by sequence, for any documents,
batch position, policy and length; one read of consecutive steps equals those steps read one by one."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.packing import pack_batch, pack_documents, stream_offsets
from tests.loader.test_loader_packing import EOS, docs_strategy


@given(
    docs=docs_strategy(),
    seq_len=st.integers(2, 40),
    n_seq=st.integers(1, 5),
    first=st.integers(0, 8),
    policy=st.sampled_from(["masked", "allowed"]),
)
def test_pack_batch_equals_pack_sequence(docs, seq_len, n_seq, first, policy):
    offsets = stream_offsets(np.array([len(d) for d in docs]))
    total = int(offsets[-1])
    ref = pack_documents(docs, seq_len, EOS, policy, n_sequences=first + n_seq)
    stream_all = np.concatenate(docs)
    t_lo = first * seq_len
    t_end = min(t_lo + n_seq * seq_len + 1, total)
    if t_end > t_lo:
        p_lo = int(np.searchsorted(offsets, t_lo, side="right")) - 1
        p_hi = int(np.searchsorted(offsets, t_end - 1, side="right"))
    else:
        p_lo = p_hi = len(docs)
    got = pack_batch(stream_all[t_lo:t_end], t_lo, total, offsets[p_lo : p_hi + 1], n_seq, seq_len, EOS, policy)
    flat_cu = []
    for b in range(n_seq):
        seq, pieces = ref[first + b]
        for name in ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids"):
            assert np.array_equal(getattr(got, name)[b], getattr(seq, name)), (name, b)
        flat_cu.extend((seq.cu_seqlens[:-1] + b * seq_len).tolist())
        mine = [
            (p_lo + int(d), int(a), int(e))
            for s, d, a, e in zip(got.piece_sequence, got.piece_document, got.piece_start, got.piece_end, strict=True)
            if s == b
        ]
        assert mine == [tuple(p) for p in pieces]
    assert got.cu_seqlens.tolist() == [*flat_cu, n_seq * seq_len]


def check_against_reference(docs, seq_len, n_seq, first, policy):
    """pack_batch over sequences first .. first + n_seq - 1 equals pack_documents, array by array."""
    offsets = stream_offsets(np.array([len(d) for d in docs]))
    ref = pack_documents(docs, seq_len, EOS, policy, n_sequences=first + n_seq)
    t_lo, total = first * seq_len, int(offsets[-1])
    t_end = min(t_lo + n_seq * seq_len + 1, total)
    p_lo = int(np.searchsorted(offsets, t_lo, side="right")) - 1
    p_hi = int(np.searchsorted(offsets, t_end - 1, side="right"))
    stream = np.concatenate(docs)[t_lo:t_end]
    got = pack_batch(stream, t_lo, total, offsets[p_lo : p_hi + 1], n_seq, seq_len, EOS, policy)
    for b in range(n_seq):
        for name in ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids"):
            assert np.array_equal(getattr(got, name)[b], getattr(ref[first + b][0], name)), (name, b)


@pytest.mark.parametrize(
    ("seq_len", "n_seq", "shortest", "longest"),
    [
        (4096, 24, 150, 600),  # 98,304 positions: the 16-bit position arithmetic wraps past 65,536, stays exact
        (40000, 2, 1, 1),  # 40,000 one-token documents a sequence: segment indices past int16 (int32 here)
        (100000, 2, 70000, 90000),  # segments longer than 2**16: 32-bit position arithmetic
    ],
)
def test_pack_batch_narrow_arithmetic_is_exact_at_any_length(seq_len, n_seq, shortest, longest):
    rng = np.random.default_rng(seq_len)
    lengths = rng.integers(shortest, longest + 1, (n_seq + 2) * seq_len // shortest + 1)
    docs = [rng.integers(0, 50000, int(n)).astype(np.uint16) for n in lengths]
    for d in docs:
        d[-1] = EOS
    check_against_reference(docs, seq_len, n_seq, 1, "masked")


def batch_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        if hasattr(v, "dtype"):
            assert v.dtype == b[k].dtype and v.shape == b[k].shape and bool((v == b[k]).all()), k
        else:
            assert v == b[k], k


@given(
    docs=docs_strategy(),
    seq_len=st.integers(2, 24),
    gb=st.integers(1, 4),
    first=st.integers(0, 12),
    n=st.integers(1, 9),
    policy=st.sampled_from(["masked", "allowed"]),
)
def test_one_read_of_consecutive_steps_equals_step_by_step(docs, seq_len, gb, first, n, policy):
    """SegmentReader.batches (one read, verify and pack over a run of steps, as the in-process loader serves them)
    gives exactly the batches of SegmentReader.batch, step by step, up to the epoch's last (padded) step."""
    from loader import in_memory_view
    from loader.plan import BatchPlan
    from loader.read_ahead import SegmentReader

    view = in_memory_view(
        list(docs), seq_len=seq_len, eos_id=EOS, cross_document_attention=policy, epochs=2, block_size=3
    )
    plan = BatchPlan(view, gb)
    first = first % plan.schedule.total_steps
    k = plan.run_length(first, 1, n, plan.schedule.total_steps)
    assert 1 <= k <= n and (first + k - 1) // plan.schedule.steps_per_epoch == first // plan.schedule.steps_per_epoch
    got = SegmentReader(plan).batches(first, k)
    assert len(got) == k
    for j, b in enumerate(got):
        batch_equal(b, SegmentReader(plan).batch(first + j))
    assert plan.run_length(first, 2, n) == 1  # ranks' sequences are not one range: one step at a time


def test_pooled_blocks_are_reused_only_after_every_batch_of_them_is_dropped():
    """The loader recycles a packed block once no batch references it: batches held by the consumer keep their
    values while later ones are made, and a dropped batch's block is written again (no fresh pages)."""
    from loader import RunViewLoader, in_memory_view
    from loader.packing import BlockPool
    from loader.plan import BatchPlan
    from loader.read_ahead import SegmentReader
    from tests.loader.views import gpt2_docs

    view = in_memory_view(list(gpt2_docs(40)), seq_len=64, eos_id=EOS, epochs=3, block_size=4)
    data = RunViewLoader(view, 4, prefetch=0)
    data.plan._pool = BlockPool()  # its own, not the process's (other tests' blocks)
    held = list(data)  # every batch of 3 epochs kept alive
    reference = SegmentReader(BatchPlan(view, 4))
    assert len(held) == reference.plan.schedule.total_steps > 24  # more batches than the pool keeps
    for b in held:
        batch_equal(b, reference.batch(b["step"]))
    pool = data.plan._pool
    assert all(sys.getrefcount(x) > 2 for x in pool._blocks)  # all still in use
    del held, b
    pointers = {x.ctypes.data for x in pool._blocks}
    again = RunViewLoader(view, 4, prefetch=0)
    again.dataset.plan._pool = pool
    first = next(iter(again))
    assert first["input_ids"].untyped_storage().data_ptr() in pointers  # a dropped block was reused
    batch_equal(first, reference.batch(0))
