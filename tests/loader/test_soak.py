"""Soak drill: 4 gloo ranks x 2 DataLoader workers read the run view from S3 (SeaweedFS on loopback, through a
shared node cache), train a tiny model and save model + optimizer + loader with torch DCP every K steps.

- control: world 4, uninterrupted, STEPS steps;
- A: world 4; rank 2 is SIGKILLed mid-run (after step KILL_RUN_STEP), the others with it (as torchrun does);
  the latest complete checkpoint is the one before;
- B: world 4 resumes from it; rank 1 is SIGKILLed mid-save (its DCP data files written, the coordinator
  waiting for it, so `.metadata` never lands), the others with it: that checkpoint does not exist;
- C: world 2 resumes from the last complete checkpoint and runs to the end.

B serves, rank by rank, exactly what the control served (samples, token counter, loss bit for bit); C's global
batches (ranks concatenated), token counters and losses equal the control's for the >= 50 steps after its resume
(losses up to float summation order: gradients are all-reduced over another number of ranks).

The ranks are this file run as a script (`python test_soak.py worker ...`).
"""

from __future__ import annotations

import argparse
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
GLOBAL_BATCH = 24
EVERY = 5  # steps between DCP checkpoints
STEPS = 90  # ~13 epochs of the 60-document view (7 steps each)
KILL_RUN_STEP = 23  # A: rank 2 dies after serving step 23 (latest complete checkpoint: 20)
KILL_SAVE_STEP = 35  # B: rank 1 dies inside the save after step 34 (latest complete: 30)


# ---- one rank ----------------------------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    import loader
    from loader import dcp as ldcp
    from loader.storage import StorageConfig
    from tests.loader.training import Trainer, tiny_model, train_step

    torch.set_num_threads(1)
    rank, world = args.rank, args.world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = tiny_model()
    optim = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    storage = StorageConfig(cache_dir=args.cache, cache_bytes=64 << 20, backoff_base_s=0.01)
    view = loader.open_run_view(bundle=args.bundle, io_properties=json.loads(args.props), storage=storage)
    data = loader.RunViewLoader(view, GLOBAL_BATCH, num_workers=2, multiprocessing_context="fork", max_steps=STEPS)
    counter = torch.zeros(1, dtype=torch.long)
    state = {"trainer": Trainer(model, optim), "loader": data, "counters": {"tokens_seen": counter}}
    start = ldcp.load(state, args.ckpt)
    log = open(args.log, "a", encoding="utf-8")
    log.write(json.dumps({"resumed_from": start, "cursor": data.global_step}) + "\n")
    log.flush()
    for b in data:
        k = b["step"]
        loss = train_step(model, optim, b, counter)
        log.write(json.dumps({"step": k, "documents": list(b["documents"]), "tokens_seen": int(counter),
                              "loss": loss}) + "\n")  # fmt: skip
        log.flush()  # in the page cache: survives the SIGKILL
        if rank == args.hang_rank and k == args.hang_after_step:
            Path(args.log).with_suffix(".hung").touch()
            time.sleep(600)  # mid-run: waits for the SIGKILL
        if (k + 1) % EVERY == 0:
            kwargs = {}
            if rank == args.hang_rank and k + 1 == args.hang_in_save:
                kwargs["storage_writer"] = _hanging_writer(dcp, ldcp.checkpoint_path(args.ckpt, k + 1), args.log)
            ldcp.save(state, args.ckpt, k + 1, **kwargs)
    log.write(json.dumps({"done": data.global_step, "metrics": data.metrics()}, default=str) + "\n")
    log.close()
    dist.destroy_process_group()


def _hanging_writer(dcp, path: Path, log: str):
    """A FileSystemWriter that writes this rank's data files, then hangs before handing its results to the
    coordinator: killed there, the checkpoint has data files and no `.metadata`."""

    class Hanging(dcp.FileSystemWriter):
        def write_data(self, plan, planner):
            fut = super().write_data(plan, planner)
            fut.wait()
            Path(log).with_suffix(".hung").touch()
            time.sleep(600)
            return fut

    return Hanging(str(path))


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["worker"])
    for name in ("rank", "world", "port"):
        p.add_argument(f"--{name}", type=int, required=True)
    for name in ("bundle", "props", "cache", "ckpt", "log"):
        p.add_argument(f"--{name}", required=True)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-after-step", type=int, default=-1)
    p.add_argument("--hang-in-save", type=int, default=-1)
    worker(p.parse_args(argv))


# ---- the drill ---------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp: Path, phase: str, world: int, common: dict, ckpt: Path, **hang) -> list[subprocess.Popen]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = []
    for rank in range(world):
        cmd = [sys.executable, __file__, "worker", "--rank", str(rank), "--world", str(world), "--port", str(port),
               "--ckpt", str(ckpt), "--log", str(tmp / f"{phase}-rank{rank}.jsonl")]  # fmt: skip
        for k, v in {**common, **hang}.items():
            cmd += [f"--{k.replace('_', '-')}", str(v)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> None:
    for rank, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"rank {rank} exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}"


def kill_at(procs: list[subprocess.Popen], hung: Path, victim: int, timeout: float = 240) -> None:
    """Wait until the victim rank hangs at its point, SIGKILL it, then the others (as torchrun would)."""
    deadline = time.monotonic() + timeout
    while not hung.exists():
        dead = [(i, p.returncode) for i, p in enumerate(procs) if p.poll() is not None]
        if dead:
            out = procs[dead[0][0]].communicate()[0].decode(errors="replace")[-3000:]
            raise AssertionError(f"rank exited early {dead} before the kill point:\n{out}")
        assert time.monotonic() < deadline, "the run did not reach the kill point"
        time.sleep(0.05)
    procs[victim].send_signal(signal.SIGKILL)
    assert procs[victim].wait(10) == -signal.SIGKILL
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)


def read_log(path: Path) -> tuple[dict, dict[int, dict]]:
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    return lines[0], {r["step"]: r for r in lines if "step" in r}


def global_steps(tmp: Path, phase: str, world: int) -> dict[int, dict]:
    """Per step: the global batch's documents (ranks concatenated), the token counter, the loss."""
    logs = [read_log(tmp / f"{phase}-rank{r}.jsonl")[1] for r in range(world)]
    out = {}
    for k in logs[0]:
        if all(k in lg for lg in logs):
            recs = [lg[k] for lg in logs]
            assert len({r["tokens_seen"] for r in recs}) == 1 and len({r["loss"] for r in recs}) == 1
            docs = [d for r in recs for d in r["documents"]]
            out[k] = {"documents": docs, "tokens_seen": recs[0]["tokens_seen"], "loss": recs[0]["loss"]}
    return out


@pytest.mark.slow  # a drill: 14 rank processes with 2 workers each, two SIGKILLs, SeaweedFS (~2-4 min on 2 cores)
def test_soak_sigkill_mid_run_and_mid_save_then_resume_at_world_4_and_2(seaweedfs, tmp_path):  # noqa: F811
    from loader import dcp as ldcp
    from tests.loader.s3views import upload_bundle

    bundle, props = upload_bundle(seaweedfs, tmp_path)
    common = {"bundle": bundle, "props": json.dumps(props), "cache": tmp_path / "node-cache"}
    control_dir, soak_dir = tmp_path / "ckpt-control", tmp_path / "ckpt-soak"
    started: list[subprocess.Popen] = []
    try:
        control = launch(tmp_path, "control", 4, common, control_dir)
        started += control
        finish(control)
        a = launch(tmp_path, "a", 4, common, soak_dir, hang_rank=2, hang_after_step=KILL_RUN_STEP)
        started += a
        kill_at(a, tmp_path / "a-rank2.hung", victim=2)
        assert ldcp.latest_checkpoint(soak_dir)[0] == 20
        b = launch(tmp_path, "b", 4, common, soak_dir, hang_rank=1, hang_in_save=KILL_SAVE_STEP)
        started += b
        kill_at(b, tmp_path / "b-rank1.hung", victim=1)
        torn = ldcp.checkpoint_path(soak_dir, KILL_SAVE_STEP)
        assert any(torn.glob("*.distcp")) and not (torn / ldcp.METADATA).exists()  # data written, never completed
        assert ldcp.latest_checkpoint(soak_dir)[0] == 30
        c = launch(tmp_path, "c", 2, common, soak_dir)
        started += c
        finish(c)
    finally:
        for p in started:  # a failed assertion must not leave ranks running
            if p.poll() is None:
                p.kill()
                p.wait()

    ref = global_steps(tmp_path, "control", 4)
    assert sorted(ref) == list(range(STEPS))
    for rank in range(4):  # B at world 4: rank by rank, bit for bit
        head, served = read_log(tmp_path / f"b-rank{rank}.jsonl")
        _, control = read_log(tmp_path / f"control-rank{rank}.jsonl")
        assert head == {"resumed_from": 20, "cursor": 20}
        assert min(served) == 20 and max(served) >= KILL_SAVE_STEP - 1
        assert all(served[k] == control[k] for k in served)
    for rank in range(2):
        assert read_log(tmp_path / f"c-rank{rank}.jsonl")[0] == {"resumed_from": 30, "cursor": 30}
    got = global_steps(tmp_path, "c", 2)
    assert sorted(got) == list(range(30, STEPS)) and len(got) >= 50
    for k in got:
        assert got[k]["documents"] == ref[k]["documents"], k
        assert got[k]["tokens_seen"] == ref[k]["tokens_seen"], k
        assert got[k]["loss"] == pytest.approx(ref[k]["loss"], rel=1e-4), k
    assert got[STEPS - 1]["loss"] < ref[0]["loss"]  # several updates happened: the model learned
    done = json.loads((tmp_path / "c-rank0.jsonl").read_text().splitlines()[-1])
    assert done["done"] == STEPS and done["metrics"]["cache_hit_rate"] is not None


from tests.cluster.servers import seaweedfs  # noqa: E402,F401 - the session fixture

if __name__ == "__main__":
    main(sys.argv[1:])
