"""Must-show 1: for world sizes {1,2,3,4,8} x DataLoader workers {0,1,3} on a real published view, the ranks'
sequences are disjoint, their union is the whole epoch (nothing dropped: the last global batch is padded) and
every global batch is identical to the single-rank one; plus one real multi-process gloo run."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from loader import RunViewLoader
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH, concat_ranks, run, same_global


@pytest.fixture(scope="module")
def reference():
    view = views.view("a")
    spe = RunViewLoader(view, GLOBAL_BATCH).plan.schedule.steps_per_epoch
    steps = spe + 1  # one whole epoch and the first step of the next
    return view, steps, run(RunViewLoader(view, GLOBAL_BATCH, max_steps=steps))


def test_reference_epoch_serves_every_token_of_every_sample_exactly_once(reference):
    view, steps, ref = reference
    spe = steps - 1
    served: dict[int, list[tuple[int, int]]] = {}
    tokens: dict[int, list[np.ndarray]] = {}
    for b in ref[:spe]:
        for row, (doc_spans, sidx) in enumerate(zip(b["documents"], b["sample_indices"])):
            at = 0
            for (doc_id, a, e), s in zip(doc_spans, sidx):
                assert view.doc_ids[s] == doc_id
                served.setdefault(s, []).append((a, e))
                tokens.setdefault(s, []).append(b["input_ids"][row, at : at + e - a].numpy())
                at += e - a
    assert sorted(served) == list(range(view.n_samples))
    truth = view.source.read(range(view.n_samples))
    for s, spans in served.items():
        spans.sort()
        assert spans[0][0] == 0 and spans[-1][1] == view.n_tokens[s]
        assert all(x[1] == y[0] for x, y in zip(spans, spans[1:]))  # no gap, no overlap
        assert np.array_equal(np.concatenate(tokens[s]), truth[s].astype(np.int64))
    # the padding rule: the epoch's last global batch is filled up with fully masked sequences
    last = ref[spe - 1]
    padded = [i for i, d in enumerate(last["documents"]) if not d]
    n_seq = -(-view.tokens_per_epoch // views.SEQ_LEN)
    assert len(padded) == spe * GLOBAL_BATCH - n_seq > 0
    assert int(last["loss_mask"][padded].sum()) == 0
    assert ref[spe]["epoch"] == 1 and ref[spe]["sequence_index"].tolist() == list(range(GLOBAL_BATCH))


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize("num_workers", [0, 1, 3])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_rank_and_worker_slices_are_disjoint_complete_and_world_independent(reference, world, num_workers):
    view, steps, ref = reference
    per_rank = [
        run(RunViewLoader(view, GLOBAL_BATCH, rank=r, world_size=world, num_workers=num_workers, max_steps=steps))
        for r in range(world)
    ]
    seen: set[tuple[int, int]] = set()
    for r, batches in enumerate(per_rank):
        assert [b["step"] for b in batches] == list(range(steps))
        assert all(b["rank"] == r and b["input_ids"].shape[0] == GLOBAL_BATCH // world for b in batches)
        mine = {(b["epoch"], int(i)) for b in batches for i in b["sequence_index"]}
        assert not mine & seen, f"rank {r} repeats sequences of another rank"
        seen |= mine
    assert seen == {(b["epoch"], int(i)) for b in ref for i in b["sequence_index"]}
    for k in range(steps):
        assert same_global(concat_ranks([per_rank[r][k] for r in range(world)]), ref[k]), f"global batch {k}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_gloo_ranks_take_rank_and_world_from_torch_distributed(reference, tmp_path):
    view, steps, ref = reference
    world = 4
    # fork, not spawn: a child re-importing torch costs seconds per rank on a 2-core CI machine
    mp.start_processes(
        views.gloo_worker,
        args=(world, _free_port(), str(views.bundle()), str(tmp_path), steps),
        nprocs=world,
        join=True,
        start_method="fork",
    )
    outs = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(world)]
    assert all(o["total"] == steps * GLOBAL_BATCH * views.SEQ_LEN for o in outs)
    assert all(o["state"] == outs[0]["state"] for o in outs) and outs[0]["state"]["global_step"] == steps
    for r, o in enumerate(outs):
        assert all(b["rank"] == r and b["world_size"] == world for b in o["batches"])
    for k in range(steps):
        assert same_global(concat_ranks([o["batches"][k] for o in outs]), ref[k])
