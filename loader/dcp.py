"""Checkpointing the loader with torch distributed checkpoint (DCP), beside the model and the optimizer.

`RunViewLoader` (and `RunViewDataset`) implement `torch.distributed.checkpoint.stateful.Stateful`: DCP calls
`state_dict()` on save and `load_state_dict()` on load. The loader's state is the one global cursor plus its
fingerprint, identical on every rank, so DCP stores it once and any world size that divides the global batch
size loads it (elastic resume):

    state = {"model": model_sd, "optim": optim_sd, "loader": data}   # data: RunViewLoader
    loader.dcp.save(state, root, step)                             # every rank, collectively
    ...
    step = loader.dcp.load(state, root)                            # latest complete checkpoint, or None

Layout: `root/step-<10 digits>/` is one DCP checkpoint. DCP writes each rank's data files first and the
`.metadata` file last (through a temporary name and a rename), so a directory without `.metadata` is an
incomplete generation (a rank killed mid-save) and is ignored: `latest_checkpoint` only returns complete ones.

Delivery semantics: deterministic at-least-once replay. Resuming from the last completed checkpoint serves
again exactly the global batches after its cursor, the same ones an uninterrupted run served there; steps
trained after that checkpoint and before the failure are trained again, with the same data.

This replaces the home-made `loader.checkpoint` writer (retired): DCP gives the same guarantees (atomic
completion marker, any world size) for the model and optimizer too, and is what a PyTorch trainer already uses.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

_STEP_DIR = re.compile(r"^step-(\d{10})$")
METADATA = ".metadata"


def checkpoint_path(root: str | os.PathLike, step: int) -> Path:
    """The directory of the checkpoint taken after `step` global steps."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 10**10:
        raise ValueError(f"step must be an int in [0, 1e10), got {step!r}")
    return Path(root) / f"step-{step:010d}"


def checkpoints(root: str | os.PathLike, *, complete: bool = True) -> list[tuple[int, Path]]:
    """(step, directory) of every checkpoint under `root`, oldest first; complete ones only by default."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and p.is_dir() and (not complete or (p / METADATA).is_file()):
            out.append((int(m.group(1)), p))
    return sorted(out)


def latest_checkpoint(root: str | os.PathLike) -> tuple[int, Path] | None:
    """The newest complete checkpoint (its `.metadata` written), or None; incomplete ones are ignored."""
    done = checkpoints(root)
    return done[-1] if done else None


def save(state: dict[str, Any], root: str | os.PathLike, step: int, **kwargs: Any) -> Path:
    """`torch.distributed.checkpoint.save(state)` into `checkpoint_path(root, step)` (collective: every rank
    calls it). An incomplete directory of the same step, left by a killed attempt, is replaced."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    path = checkpoint_path(root, step)
    if (path / METADATA).is_file():
        raise FileExistsError(f"checkpoint {path} is complete already; checkpoints are immutable, save the next step")
    if not dist.is_initialized() or dist.get_rank() == 0:
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    if dist.is_initialized():
        dist.barrier()
    dcp.save(state, checkpoint_id=str(path), **kwargs)
    return path


def load(state: dict[str, Any], root: str | os.PathLike, **kwargs: Any) -> int | None:
    """Load the latest complete checkpoint under `root` into `state` in place (Stateful entries get their
    `load_state_dict` called); returns its step, or None when there is none (a fresh start)."""
    import torch.distributed.checkpoint as dcp

    latest = latest_checkpoint(root)
    if latest is None:
        return None
    step, path = latest
    dcp.load(state, checkpoint_id=str(path), **kwargs)
    return step


def prune(root: str | os.PathLike, keep: int) -> list[int]:
    """Delete all but the newest `keep` complete checkpoints, and incomplete ones older than the newest
    complete one; returns the steps removed. Call on one rank, outside a save."""
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    done = checkpoints(root)
    newest = done[-1][0] if done else None
    removed = [s for s, _ in done[:-keep]]
    for _, p in done[:-keep]:
        shutil.rmtree(p, ignore_errors=True)
    for s, p in checkpoints(root, complete=False):
        if newest is not None and s < newest and not (p / METADATA).is_file():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(s)
    return sorted(removed)
