"""Checkpoint generations: atomic per-rank files, rank 0's verified marker, readers that skip incomplete ones."""

from __future__ import annotations

import json
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from loader import checkpoint as ckpt


def rank_state(rank: int, step: int) -> dict:
    """What a training rank would save: model weights and the loader's state."""
    return {
        "model": {"w": torch.full((4, 3), float(rank * 100 + step))},
        "loader": {"cursor": step * 8, "run_view_id": "rv-test", "rank": rank},
    }


def save_all(directory: Path, generation: int, world: int, attempt: str, ranks=None, timeout_s: float = 30.0):
    """Every rank in `ranks` (default all) saves `generation` concurrently, in filesystem mode; the results."""
    ranks = list(range(world)) if ranks is None else ranks

    def one(rank):
        try:
            return ckpt.save_generation(
                directory,
                generation,
                rank_state(rank, generation),
                rank=rank,
                world_size=world,
                attempt=attempt,
                timeout_s=timeout_s,
            )
        except ckpt.CheckpointError as exc:
            return exc

    with ThreadPoolExecutor(len(ranks)) as pool:
        return list(pool.map(one, ranks))


def test_generation_round_trip(tmp_path):
    assert ckpt.latest_complete_generation(tmp_path) is None
    for gen in (1, 2):
        markers = save_all(tmp_path, gen, world=3, attempt="a1")
        assert all(m == markers[0] for m in markers)  # every rank returns rank 0's marker
        assert markers[0]["world_size"] == 3 and set(markers[0]["files"]) == {"0", "1", "2"}
    assert ckpt.complete_generations(tmp_path) == [1, 2]
    assert ckpt.latest_complete_generation(tmp_path) == 2
    for rank in range(3):
        got = ckpt.load(tmp_path, 2, rank)
        assert got["loader"] == rank_state(rank, 2)["loader"]
        assert torch.equal(got["model"]["w"], rank_state(rank, 2)["model"]["w"])
    leftovers = [p.name for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
    marker = json.loads((ckpt.generation_dir(tmp_path, 2) / ckpt.MARKER).read_text())
    for entry in marker["files"].values():
        assert ckpt.file_sha256(ckpt.generation_dir(tmp_path, 2) / entry["file"]) == (entry["sha256"], entry["bytes"])


def test_missing_rank_leaves_generation_incomplete(tmp_path):
    save_all(tmp_path, 1, world=3, attempt="a1")
    results = save_all(tmp_path, 2, world=3, attempt="a1", ranks=[0, 1], timeout_s=0.5)
    assert all(isinstance(r, ckpt.CheckpointError) for r in results)
    assert "ranks [2] of 3" in str(results[0])
    assert not (ckpt.generation_dir(tmp_path, 2) / ckpt.MARKER).exists()
    assert ckpt.generations(tmp_path) == [1, 2]
    assert ckpt.latest_complete_generation(tmp_path) == 1
    with pytest.raises(ckpt.IncompleteGeneration, match="generation 2"):
        ckpt.load(tmp_path, 2, 0)


def test_record_of_an_earlier_killed_attempt_is_not_accepted(tmp_path):
    # attempt A: rank 1 finished generation 1, rank 0 died before the marker
    save_all(tmp_path, 1, world=2, attempt="A", ranks=[1], timeout_s=0.2)
    # attempt B (the restart): rank 0 alone must not complete the generation with A's rank-1 file
    (result,) = save_all(tmp_path, 1, world=2, attempt="B", ranks=[0], timeout_s=0.5)
    assert isinstance(result, ckpt.CheckpointError) and "ranks [1]" in str(result)
    assert ckpt.latest_complete_generation(tmp_path) is None
    markers = save_all(tmp_path, 1, world=2, attempt="B")
    assert markers[0]["attempt"] == "B"
    assert ckpt.load(tmp_path, 1, 1)["loader"]["rank"] == 1


def test_rank0_refuses_a_file_that_does_not_match_its_record(tmp_path):
    gdir = ckpt.generation_dir(tmp_path, 1)
    gdir.mkdir(parents=True)
    ckpt._write_rank_file(gdir, 1, 1, 2, "a1", rank_state(1, 1))
    with open(gdir / "rank-00001.pt", "r+b") as fh:  # bit rot between rank 1's write and rank 0's check
        fh.seek(40)
        byte = fh.read(1)
        fh.seek(40)
        fh.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ckpt.CheckpointCorrupt, match="rank 1"):
        ckpt.save_generation(tmp_path, 1, rank_state(0, 1), rank=0, world_size=2, attempt="a1", timeout_s=5)
    assert ckpt.latest_complete_generation(tmp_path) is None


def test_corrupt_file_after_completion_is_detected_on_load(tmp_path):
    save_all(tmp_path, 1, world=2, attempt="a1")
    save_all(tmp_path, 2, world=2, attempt="a1")
    path = ckpt.generation_dir(tmp_path, 2) / "rank-00001.pt"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ckpt.CheckpointCorrupt, match="rank-00001.pt"):
        ckpt.load(tmp_path, 2, 1)
    assert ckpt.latest_complete_generation(tmp_path) == 2  # the marker alone says complete
    assert ckpt.latest_complete_generation(tmp_path, verify=True) == 1


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"format": "tokenlake.checkpoint/1"',
        b"[]",
        b'{"format":"tokenlake.checkpoint/1","generation":1,"world_size":2,"files":{"0":{}}}',
    ],
)
def test_partial_or_foreign_marker_counts_as_incomplete(tmp_path, content):
    save_all(tmp_path, 1, world=2, attempt="a1")
    (ckpt.generation_dir(tmp_path, 1) / ckpt.MARKER).write_bytes(content)
    assert ckpt.latest_complete_generation(tmp_path) is None


def test_complete_generation_is_immutable(tmp_path):
    save_all(tmp_path, 3, world=1, attempt="a1")
    with pytest.raises(ckpt.GenerationExists, match="generation 3 .* save generation 4"):
        ckpt.save_generation(tmp_path, 3, {}, rank=0, world_size=1, attempt="a2")


def test_load_of_a_rank_that_did_not_save_names_the_saved_ranks(tmp_path):
    save_all(tmp_path, 1, world=2, attempt="a1")
    with pytest.raises(ckpt.CheckpointError, match="ranks 0..1, not rank 5"):
        ckpt.load(tmp_path, 1, 5)


def test_bad_arguments(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    with pytest.raises(ValueError, match="attempt="):
        ckpt.save_generation(tmp_path, 1, {}, rank=0, world_size=1)
    with pytest.raises(ValueError, match="rank must be .* got 2"):
        ckpt.save_generation(tmp_path, 1, {}, rank=2, world_size=2, attempt="x")
    with pytest.raises(ValueError, match="both rank and world_size"):
        ckpt.save_generation(tmp_path, 1, {}, rank=0)
    with pytest.raises(ValueError, match="generation must be"):
        ckpt.save_generation(tmp_path, -1, {}, rank=0, world_size=1, attempt="x")
    with pytest.raises(ValueError, match="attempt must be"):
        ckpt.save_generation(tmp_path, 1, {}, rank=0, world_size=1, attempt="a/b")
    with pytest.raises(ValueError, match="torch.distributed"):
        ckpt.save_generation(tmp_path, 1, {})
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert ckpt.save_generation(tmp_path, 1, {}, rank=0, world_size=1)["attempt"] == "job7-2"


def test_prune_keeps_the_newest_complete_generations(tmp_path):
    for gen in (1, 2, 3):
        save_all(tmp_path, gen, world=1, attempt="a1")
    (ckpt.generation_dir(tmp_path, 4)).mkdir()  # an incomplete newer one: a save in progress, kept
    save_all(tmp_path, 5, world=2, attempt="a1", ranks=[1], timeout_s=0.1)
    assert ckpt.prune(tmp_path, keep=2) == [1]
    assert ckpt.generations(tmp_path) == [2, 3, 4, 5]
    assert ckpt.latest_complete_generation(tmp_path) == 3


# ---- torch.distributed (gloo) -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dist_worker(rank: int, world: int, port: int, directory: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        first = ckpt.save_generation(directory, 1, rank_state(rank, 1))
        second = ckpt.save_generation(directory, 2, rank_state(rank, 2))
        assert first["attempt"] != second["attempt"]
        try:
            ckpt.save_generation(directory, 2, rank_state(rank, 2))
        except ckpt.CheckpointError as exc:  # every rank hears of it, none hangs
            assert "already complete" in str(exc)
        else:
            raise AssertionError("re-saving a complete generation did not fail")
        Path(directory, f"ok-{rank}").write_text(json.dumps(second))
    finally:
        dist.destroy_process_group()


def test_gloo_ranks_complete_generations_together(tmp_path):
    world = 2
    mp.start_processes(
        _dist_worker, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True, start_method="spawn"
    )
    markers = [json.loads((tmp_path / f"ok-{r}").read_text()) for r in range(world)]
    assert markers[0] == markers[1]
    assert ckpt.complete_generations(tmp_path) == [1, 2]
    assert ckpt.load(tmp_path, 2, 1)["loader"] == rank_state(1, 2)["loader"]
    assert os.listdir(ckpt.generation_dir(tmp_path, 2)) and not list(tmp_path.rglob("*.tmp-*"))
