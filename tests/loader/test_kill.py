"""Kill test: a rank SIGKILLed mid-epoch in a world-2 gloo soak with periodic checkpoint generations; the restart
from the last complete generation continues exactly like an uninterrupted control run.

The training processes are this file run as a script (`python test_kill.py worker ...`): each rank opens the
published run view (its exported bundle), iterates RunViewLoader (with the prefetch thread) on its rank, takes
an SGD step of a tiny model whose gradients are all-reduced over gloo, adds the step's tokens (all-reduced) to
a token counter, logs what it was served, and every EVERY steps saves {"model", "tokens_seen", "loader"} as a
checkpoint generation (loader.checkpoint over torch.distributed).

Scenario: rank 1 stops just before it would save generation KILL_GEN (rank 0 has already written its file of
that generation and waits in the collective), and is SIGKILLed there; rank 0 is killed after it, as torchrun
tears the group down. The restart (both ranks, new attempt) must load generation KILL_GEN - 1 and, from its cursor on,
serve every rank the same samples and reach the same token counter, model weights and loader state as the
control.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORLD = 2
GLOBAL_BATCH = 4
SEQ_LEN = 64
EVERY = 6  # steps between checkpoint generations
STEPS = 96  # 16 generations; ~36 steps per epoch for the 60-document view, so this spans 3 epochs
LR = 1e-3
KILL_GEN = 8  # rank 1 dies before saving generation 8 (after step 47, mid-epoch 1)
BUCKETS = 1021  # the tiny model hashes token ids into this many embedding rows (keeps each all-reduce small)


# ---- the training process --------------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """One rank of the soak: train, log, checkpoint; resume from the latest complete generation if any."""
    import torch
    import torch.distributed as dist

    from loader import checkpoint as ckpt
    from loader.dataset import RunViewLoader
    from loader.metrics import LoaderMetrics
    from loader.view import open_run_view

    torch.set_num_threads(1)
    rank, world = args.rank, args.world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(BUCKETS, 4, mode="sum"), torch.nn.Linear(4, 1))
    tokens_seen = torch.zeros((), dtype=torch.int64)
    data = RunViewLoader(
        open_run_view(bundle=args.bundle),
        GLOBAL_BATCH,
        rank=rank,
        world_size=world,
        prefetch=2,
        max_steps=STEPS,
        metrics=LoaderMetrics(),
    )
    gen = ckpt.latest_complete_generation(args.ckpt)
    if gen is not None:
        saved = ckpt.load(args.ckpt, gen, rank)
        model.load_state_dict(saved["model"])
        tokens_seen = saved["tokens_seen"]
        data.load_state_dict(saved["loader"])
    log = open(args.log, "a", encoding="utf-8")
    log.write(json.dumps({"resumed_from": gen, "cursor": data.global_step}) + "\n")
    log.flush()
    for batch in data:
        step = batch["step"]
        mask = batch["loss_mask"].bool()
        n = torch.tensor(int(mask.sum()), dtype=torch.int64)
        dist.all_reduce(n)
        tokens_seen += n
        model.zero_grad()
        ids = batch["input_ids"]
        out = model[1](model[0](ids % BUCKETS) / SEQ_LEN)
        loss = ((out.squeeze(-1) - 1.0) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():  # data parallel: average the gradients over ranks, plain SGD step
                dist.all_reduce(p.grad)
                p -= LR * p.grad / world  # (torch.optim would import torch._dynamo: seconds per process)
        log.write(
            json.dumps(
                {
                    "step": step,
                    "epoch": batch["epoch"],
                    "sample_indices": batch["sample_indices"],
                    "documents": batch["documents"],
                    "input_sha256": hashlib.sha256(ids.numpy().tobytes()).hexdigest(),
                    "tokens_seen": int(tokens_seen),
                    "loss": float(loss.detach()),
                }
            )
            + "\n"
        )
        log.flush()  # in the page cache: survives the SIGKILL
        if (step + 1) % EVERY == 0:
            g = (step + 1) // EVERY
            if rank == args.hang_rank and g == args.hang_before_generation:
                Path(args.log).with_suffix(".hung").touch()
                time.sleep(600)  # waits for the SIGKILL
            ckpt.save_generation(
                args.ckpt, g, {"model": model.state_dict(), "tokens_seen": tokens_seen, "loader": data.state_dict()}
            )
    log.write(json.dumps({"done": data.global_step, "metrics": data.meter.summary()}) + "\n")
    log.close()
    dist.destroy_process_group()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["worker"])
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-before-generation", type=int, default=-1)
    worker(p.parse_args(argv))


# ---- the test ---------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp: Path, phase: str, bundle: Path, ckpt_dir: Path, **hang) -> list[subprocess.Popen]:
    """Start WORLD ranks of one phase; logs under tmp/<phase>-rank<r>.jsonl."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(WORLD):
        cmd = [
            sys.executable,
            __file__,
            "worker",
            "--rank",
            str(rank),
            "--world",
            str(WORLD),
            "--port",
            str(port),
            "--bundle",
            str(bundle),
            "--ckpt",
            str(ckpt_dir),
            "--log",
            str(tmp / f"{phase}-rank{rank}.jsonl"),
        ]
        if hang:
            cmd += ["--hang-rank", str(hang["rank"]), "--hang-before-generation", str(hang["generation"])]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 120) -> None:
    """Wait for every rank; fail with its output if one did not exit 0."""
    for rank, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}"


def read_log(path: Path) -> tuple[dict, dict[int, dict]]:
    """(the header line, {step: record}) of one rank's log."""
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    return lines[0], {rec["step"]: rec for rec in lines if "step" in rec}


def wait_for(predicate, procs, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        dead = [p.returncode for p in procs if p.poll() is not None]
        assert not dead, f"a rank exited early ({dead}) before the kill point"
        assert time.monotonic() < deadline, "the soak did not reach the kill point"
        time.sleep(0.02)


def run_phases(tmp_path: Path, bundle: Path, control_dir: Path, soak_dir: Path, started: list) -> None:
    """Control and soak side by side, the kill, the torn generation, the restart; every rank exits 0."""
    from loader import checkpoint as ckpt

    # the soak, killed: rank 1 stops where it would save KILL_GEN; rank 0 has written its file of it by then
    soak = launch(tmp_path, "soak", bundle, soak_dir, rank=1, generation=KILL_GEN)
    started += soak
    control = launch(tmp_path, "control", bundle, control_dir)  # uninterrupted, alongside
    started += control
    gen_dir = ckpt.generation_dir(soak_dir, KILL_GEN)
    wait_for(lambda: (tmp_path / "soak-rank1.hung").exists() and (gen_dir / "rank-00000.json").exists(), soak)
    soak[1].send_signal(signal.SIGKILL)
    assert soak[1].wait(10) == -signal.SIGKILL
    soak[0].send_signal(signal.SIGKILL)  # as torchrun tears down the group when a worker dies
    soak[0].wait(10)

    assert ckpt.complete_generations(soak_dir) == list(range(1, KILL_GEN))
    assert (gen_dir / "rank-00000.pt").exists() and not (gen_dir / ckpt.MARKER).exists()  # the torn generation
    assert ckpt.latest_complete_generation(soak_dir) == KILL_GEN - 1

    restart = launch(tmp_path, "restart", bundle, soak_dir)
    started += restart
    finish(control)
    finish(restart)


@pytest.mark.slow  # a drill: two gloo ranks train, one is SIGKILLed, both restart (~12 s); CI runs it
def test_sigkill_mid_epoch_then_restart_equals_control(tokenlake_home, tmp_path):
    import torch

    from loader import checkpoint as ckpt
    from loader.view import export_run_view
    from tests.run_view.builders import published_view

    # the published view, exported as a bundle: the ranks read the same pinned Parquet token files without
    # each opening the catalog (as on a cluster; it also saves ~1.5 s of CPU per rank on a 2-core runner)
    bundle = export_run_view(published_view(n_docs=60, seq_len=SEQ_LEN), tmp_path / "bundle")
    control_dir, soak_dir = tmp_path / "ckpt-control", tmp_path / "ckpt-soak"
    started: list[subprocess.Popen] = []
    try:
        run_phases(tmp_path, bundle, control_dir, soak_dir, started)
    finally:
        for proc in started:  # a failed assertion must not leave ranks running
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    cursor = (KILL_GEN - 1) * EVERY
    for rank in range(WORLD):
        _, killed = read_log(tmp_path / f"soak-rank{rank}.jsonl")
        head, resumed = read_log(tmp_path / f"restart-rank{rank}.jsonl")
        _, reference = read_log(tmp_path / f"control-rank{rank}.jsonl")
        assert sorted(reference) == list(range(STEPS))
        assert max(killed) == KILL_GEN * EVERY - 1  # served up to the step before the torn generation
        assert all(killed[s] == reference[s] for s in killed)
        kill_step = max(killed)
        assert reference[kill_step]["epoch"] == reference[kill_step + 1]["epoch"] == 1  # mid-epoch
        assert head == {"resumed_from": KILL_GEN - 1, "cursor": cursor}
        assert min(resumed) == cursor and max(resumed) == STEPS - 1
        # what the killed run served before the checkpoint, then the restart: exactly the control, step by step
        stitched = {s: r for s, r in killed.items() if s < cursor} | resumed
        assert stitched == reference  # sample ids, documents, token spans, input digest, token counter, loss

    assert ckpt.complete_generations(soak_dir) == ckpt.complete_generations(control_dir) == list(range(1, 17))
    last = STEPS // EVERY
    for rank in range(WORLD):
        a, b = ckpt.load(soak_dir, last, rank), ckpt.load(control_dir, last, rank)
        assert int(a["tokens_seen"]) == int(b["tokens_seen"]) > 0
        assert a["loader"] == b["loader"] and a["loader"]["global_step"] == STEPS
        assert all(torch.equal(a["model"][k], b["model"][k]) for k in b["model"])


if __name__ == "__main__":
    main(sys.argv[1:])
