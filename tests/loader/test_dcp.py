"""torch distributed checkpoint (DCP) with the loader as a Stateful: a world-4 gloo run saves model + optimizer +
loader every few steps; a checkpoint whose `.metadata` never got written (a rank killed mid-save) is ignored;
resuming at world 4 and at world 2 serves the same global batches, token counter and (for world 4 exactly, for
world 2 up to float summation order) the same loss as the uninterrupted run. Plus refusals through DCP."""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from torch.distributed.checkpoint.stateful import Stateful

import loader
from loader import dcp as ldcp
from tests.loader import views
from tests.loader.training import Trainer, tiny_model, train_step
from tests.loader.views import GLOBAL_BATCH

SAVE_EVERY = 3
STEPS = 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_rank(rank: int, world: int, port: int, bundle: str, root: str, out: str, steps: int, save: bool) -> None:
    """One gloo rank: resume from the latest complete checkpoint under root (if any), train `steps` steps of a
    tiny next-token model, save every SAVE_EVERY steps when `save`, and record what was served."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = tiny_model()
        optim = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        data = loader.RunViewLoader(loader.open_run_view(bundle=bundle), GLOBAL_BATCH)
        counter = torch.zeros(1, dtype=torch.long)
        state = {"trainer": Trainer(model, optim), "loader": data, "counters": {"tokens_seen": counter}}
        start = ldcp.load(state, root) or 0
        assert data.global_step == start
        records = []
        it = iter(data)
        for k in range(start, start + steps):
            b = next(it)
            loss = train_step(model, optim, b, counter)
            records.append({"step": k, "documents": b["documents"], "tokens_seen": int(counter), "loss": loss})
            if save and (k + 1) % SAVE_EVERY == 0:
                ldcp.save(state, root, k + 1)
        m = data.metrics(gather=True)  # collective: every rank's tokens/s -> the slowest vs the median
        records.append({"metrics": {k: m.get(k) for k in ("rank_tokens_per_s", "straggler_ratio", "batches")}})
        torch.save(records, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def launch(world: int, root: Path, out: Path, steps: int, save: bool) -> list[list[dict]]:
    out.mkdir(parents=True, exist_ok=True)
    mp.start_processes(
        train_rank,
        args=(world, _free_port(), str(views.bundle()), str(root), str(out), steps, save),
        nprocs=world,
        join=True,
        start_method="fork",  # a spawned child re-imports torch: seconds per rank on 2 cores
    )
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(world)]


def by_step(ranks: list[list[dict]]) -> dict[int, dict]:
    """Per global step: the global batch's documents (rank order), the token counter and the loss."""
    metrics = [r.pop()["metrics"] for r in ranks]
    assert all(m["batches"] == len(r) for m, r in zip(metrics, ranks, strict=True))
    assert all(len(m["rank_tokens_per_s"]) == len(ranks) and 0 < m["straggler_ratio"] <= 1 for m in metrics)
    out = {}
    for k, recs in enumerate(zip(*ranks, strict=True)):
        out[recs[0]["step"]] = {
            "documents": [d for r in recs for d in r["documents"]],
            "tokens_seen": recs[0]["tokens_seen"],
            "loss": recs[0]["loss"],
        }
        assert all(r["tokens_seen"] == recs[0]["tokens_seen"] for r in recs), k
    return out


def test_loader_is_a_dcp_stateful():
    data = loader.RunViewLoader(views.view(), GLOBAL_BATCH)
    assert isinstance(data, Stateful) and isinstance(data.dataset, Stateful)


def test_dcp_resume_at_world_4_and_2_equals_the_uninterrupted_run(tmp_path):
    root = tmp_path / "ckpt"
    control = by_step(launch(4, root, tmp_path / "control", STEPS, save=True))
    assert [s for s, _ in ldcp.checkpoints(root)] == [3, 6, 9]
    # step 9's save "was killed": DCP writes .metadata last, without it the generation does not exist
    (root / "step-0000000009" / ldcp.METADATA).unlink()
    assert ldcp.latest_checkpoint(root)[0] == 6
    resumed = {}
    for world in (4, 2):
        got = by_step(launch(world, root, tmp_path / f"w{world}", STEPS - 6, save=False))
        assert sorted(got) == list(range(6, STEPS))
        for k in range(6, STEPS):
            assert got[k]["documents"] == control[k]["documents"], (world, k)
            assert got[k]["tokens_seen"] == control[k]["tokens_seen"], (world, k)
            if world == 4:  # same world: bit-identical
                assert got[k]["loss"] == control[k]["loss"], (world, k)
            else:  # other world: all-reduce sums in another order
                assert got[k]["loss"] == pytest.approx(control[k]["loss"], rel=1e-5), (world, k)
        resumed[world] = got
    assert resumed[4][STEPS - 1]["loss"] < control[0]["loss"]  # the model did learn across the resume


def test_dcp_refuses_a_checkpoint_of_another_view(tmp_path):
    a = loader.RunViewLoader(views.view("a"), GLOBAL_BATCH, prefetch=0)
    it = iter(a)
    next(it)
    ldcp.save({"loader": a}, tmp_path, 1)
    b = loader.RunViewLoader(views.view("b"), GLOBAL_BATCH, prefetch=0)
    with pytest.raises(loader.StateMismatch, match=a.plan.view.run_view_id):
        ldcp.load({"loader": b}, tmp_path)
    with pytest.raises(FileExistsError):
        ldcp.save({"loader": a}, tmp_path, 1)


def test_dcp_refuses_a_checkpoint_of_another_tokenizer(tmp_path):
    docs = list(views.gpt2_docs(n=20))
    x = loader.RunViewLoader(loader.in_memory_view(docs, seq_len=32, eos_id=50256, tokenizer_id="tok-a"), 4)
    ldcp.save({"loader": x}, tmp_path, 0)
    y = loader.RunViewLoader(loader.in_memory_view(docs, seq_len=32, eos_id=50256, tokenizer_id="tok-b"), 4)
    with pytest.raises(loader.StateMismatch):  # another tokenizer is another manifest, hence another view
        ldcp.load({"loader": y}, tmp_path)


def test_prune_keeps_the_newest_and_drops_stale_incomplete(tmp_path):
    data = loader.RunViewLoader(views.view(), GLOBAL_BATCH, prefetch=0)
    for step in (1, 2, 3):
        ldcp.save({"loader": data}, tmp_path, step)
    (tmp_path / "step-0000000000").mkdir()  # an incomplete older one
    assert ldcp.prune(tmp_path, keep=1) == [0, 1, 2]
    assert [s for s, _ in ldcp.checkpoints(tmp_path, complete=False)] == [3]
    shutil.rmtree(tmp_path / "step-0000000003")
    assert ldcp.latest_checkpoint(tmp_path) is None
    assert ldcp.load({"loader": data}, tmp_path) is None


def test_metrics_are_reported_every_n_steps():
    seen = []
    data = loader.RunViewLoader(views.view(), GLOBAL_BATCH, max_steps=7, log_every=3, on_metrics=seen.append)
    assert len(list(data)) == 7
    assert [m["global_step"] for m in seen] == [3, 6]
    last = seen[-1]
    assert last["batches"] == 6 and last["tokens"] == 6 * GLOBAL_BATCH * views.SEQ_LEN
    assert last["tokens_per_s"] > 0 and 0 <= last["data_wait_fraction"] <= 1 and last["fetches"] >= 1
    assert last["fetch_latency_p50"] is not None and last["queue_depth"] >= 0
