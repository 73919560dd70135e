"""Checkpoint binding: the loader state and the model state of every rank saved as one atomic *generation*.

Layout under a checkpoint directory:

    gen-00000012/rank-00000.pt     torch.save of what rank 0 passed (e.g. {"model": ..., "loader": ...})
    gen-00000012/rank-00000.json   that rank's record: size and sha256 of its .pt, the attempt that wrote it
    gen-00000012/COMPLETE.json     rank 0's marker: every rank's file and sha256, written last

Each rank writes its file under a temporary name, fsyncs and renames it, then its record the same way. Rank 0
collects the record of every rank 0..world_size-1, re-hashes each file against it, and only then writes the
marker (atomically). A generation without a marker does not exist for the readers (`latest_complete_generation`,
`load`), so a rank killed at any point leaves the previous generation as the latest.

Ranks meet either through torch.distributed (any backend; gloo on CPU: the records travel through an
all_gather) or, with explicit `rank`/`world_size`, through the filesystem alone (rank 0 polls for the records,
the others poll for the marker). In filesystem mode an attempt id (one per launch, the same on every rank)
keeps a record left on disk by a killed earlier attempt at the same generation from being taken for this one's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import torch

FORMAT = "tokenlake.checkpoint/1"
MARKER = "COMPLETE.json"
_GEN_RE = re.compile(r"^gen-(\d{8})$")
_POLL_SECONDS = 0.02
DEFAULT_TIMEOUT_SECONDS = 600.0


class CheckpointError(Exception):
    """A checkpoint generation could not be written or read; the message names the generation and rank."""


class IncompleteGeneration(CheckpointError):
    """The generation has no valid completion marker: some rank did not finish writing it."""


class CheckpointCorrupt(CheckpointError):
    """A rank's file does not match the size or sha256 recorded in the completion marker."""


class GenerationExists(CheckpointError):
    """The generation is already complete; generations are immutable, save the next one."""


# ---- paths and small file helpers ---------------------------------------------------------------------------


def generation_dir(directory: str | os.PathLike, generation: int) -> Path:
    """The folder of one generation."""
    if isinstance(generation, bool) or not isinstance(generation, int) or not 0 <= generation < 10**8:
        raise ValueError(f"generation must be an int in [0, 1e8), got {generation!r}")
    return Path(directory) / f"gen-{generation:08d}"


def _rank_name(rank: int) -> str:
    return f"rank-{rank:05d}"


def file_sha256(path: Path) -> tuple[str, int]:
    """(hex sha256, size in bytes) of a file, read in 1 MiB blocks."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def _fsync_dir(path: Path) -> None:
    """Persist a rename or a new entry in `path` (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_path(final: Path, attempt: str) -> Path:
    return final.with_name(f".{final.name}.tmp-{attempt}-{os.getpid()}")


def _write_atomic_bytes(final: Path, data: bytes, attempt: str) -> None:
    """Write `data` to `final` via a temp file in the same folder: fsync, rename, fsync the folder."""
    tmp = _tmp_path(final, attempt)
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(final.parent)


def _canonical_json(obj: dict) -> bytes:
    return (json.dumps(obj, sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def _read_json(path: Path) -> dict | None:
    """The JSON object in `path`, or None when it is missing or not (yet) valid."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


# ---- writing ------------------------------------------------------------------------------------------------


def _write_rank_file(gdir: Path, generation: int, rank: int, world_size: int, attempt: str, state: Any) -> dict:
    """This rank's .pt (temp name, fsync, rename) and then its record; returns the record."""
    final = gdir / f"{_rank_name(rank)}.pt"
    tmp = _tmp_path(final, attempt)
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    sha256, size = file_sha256(tmp)  # hashed before the rename: the record describes exactly these bytes
    os.replace(tmp, final)
    _fsync_dir(gdir)
    record = {
        "format": FORMAT,
        "generation": generation,
        "rank": rank,
        "world_size": world_size,
        "attempt": attempt,
        "file": final.name,
        "sha256": sha256,
        "bytes": size,
    }
    _write_atomic_bytes(gdir / f"{_rank_name(rank)}.json", _canonical_json(record), attempt)
    return record


def _record_matches(record: dict | None, generation: int, rank: int, world_size: int, attempt: str) -> bool:
    return (
        record is not None
        and record.get("format") == FORMAT
        and record.get("generation") == generation
        and record.get("rank") == rank
        and record.get("world_size") == world_size
        and record.get("attempt") == attempt
    )


def _wait_for_records(gdir: Path, generation: int, world_size: int, attempt: str, timeout_s: float) -> list[dict]:
    """Rank 0: the record of every rank of this attempt, polling until `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    records: dict[int, dict] = {}
    while True:
        for rank in range(world_size):
            if rank not in records:
                rec = _read_json(gdir / f"{_rank_name(rank)}.json")
                if _record_matches(rec, generation, rank, world_size, attempt):
                    records[rank] = rec
        if len(records) == world_size:
            return [records[r] for r in range(world_size)]
        if time.monotonic() >= deadline:
            missing = sorted(set(range(world_size)) - set(records))
            raise CheckpointError(
                f"generation {generation} in {gdir.parent}: ranks {missing} of {world_size} did "
                f"not write their file within {timeout_s:.0f} s (attempt {attempt})"
            )
        time.sleep(_POLL_SECONDS)


def _verify_records(gdir: Path, generation: int, records: list[dict], verify: bool) -> dict:
    """Rank 0: check every rank's file against its record; the marker's `files` entry."""
    files = {}
    for rec in records:
        path = gdir / rec["file"]
        if not path.is_file():
            raise CheckpointCorrupt(f"generation {generation}: rank {rec['rank']} recorded {path} but it is missing")
        if verify:
            sha256, size = file_sha256(path)
        else:
            sha256, size = rec["sha256"], path.stat().st_size
        if (sha256, size) != (rec["sha256"], rec["bytes"]):
            raise CheckpointCorrupt(
                f"generation {generation}: rank {rec['rank']}'s {path.name} has sha256 {sha256} "
                f"and {size} bytes, its record says {rec['sha256']} and {rec['bytes']}"
            )
        files[str(rec["rank"])] = {"file": rec["file"], "sha256": sha256, "bytes": size}
    return files


def _write_marker(gdir: Path, generation: int, world_size: int, attempt: str, files: dict) -> dict:
    marker = {
        "format": FORMAT,
        "generation": generation,
        "world_size": world_size,
        "attempt": attempt,
        "files": files,
        "completed_at": time.time(),
    }
    _write_atomic_bytes(gdir / MARKER, _canonical_json(marker), attempt)
    return marker


def _wait_for_marker(gdir: Path, generation: int, attempt: str, timeout_s: float) -> dict:
    """Ranks > 0 in filesystem mode: rank 0's marker for this attempt, polling until `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        marker = _read_json(gdir / MARKER)
        if marker is not None and marker.get("attempt") == attempt and marker.get("generation") == generation:
            return marker
        if time.monotonic() >= deadline:
            raise CheckpointError(
                f"generation {generation} in {gdir.parent}: rank 0 wrote no completion marker "
                f"within {timeout_s:.0f} s (attempt {attempt})"
            )
        time.sleep(_POLL_SECONDS)


def default_attempt() -> str | None:
    """An attempt id from torchrun's environment (run id + restart count), or None outside torchrun."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if not run_id:
        return None
    return f"{run_id}-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"


def _check_attempt(attempt: str) -> str:
    if not isinstance(attempt, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", attempt):
        raise ValueError(f"attempt must be 1-128 characters of [A-Za-z0-9_.-], got {attempt!r}")
    return attempt


def save_generation(
    directory: str | os.PathLike,
    generation: int,
    state: Any,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    attempt: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_SECONDS,
    verify: bool = True,
) -> dict:
    """Save this rank's `state` (anything torch.save takes: {"model": ..., "loader": loader.state_dict()}) as part
    of `generation`; every rank calls it. Returns the completion marker once the generation is complete.

    With `rank`/`world_size` omitted the ranks meet through the initialised torch.distributed group (rank 0
    gathers every rank's record through it); given, they meet through the filesystem, and `attempt` (one id
    per launch, the same on every rank, new on every restart; torchrun's run id and restart count by default)
    is required; `timeout_s` bounds its waits (the process group's own timeout applies to torch.distributed).
    `verify` makes rank 0 re-hash every rank's file before it writes the marker.
    """
    if (rank is None) != (world_size is None):
        raise ValueError(f"give both rank and world_size or neither, got rank={rank!r} world_size={world_size!r}")
    if rank is None:
        return _save_distributed(directory, generation, state, attempt, verify)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    attempt = attempt if attempt is not None else default_attempt()
    if attempt is None:
        raise ValueError(
            "filesystem-mode save_generation needs attempt=<id shared by all ranks of this launch, "
            "new on every restart> (or TORCHELASTIC_RUN_ID set by torchrun)"
        )
    _check_attempt(attempt)
    gdir = _prepare(directory, generation)
    _write_rank_file(gdir, generation, rank, world_size, attempt, state)
    if rank == 0:
        records = _wait_for_records(gdir, generation, world_size, attempt, timeout_s)
        return _write_marker(gdir, generation, world_size, attempt, _verify_records(gdir, generation, records, verify))
    return _wait_for_marker(gdir, generation, attempt, timeout_s)


def _prepare(directory: str | os.PathLike, generation: int) -> Path:
    """Create the generation's folder; refuse a generation that is already complete."""
    gdir = generation_dir(directory, generation)
    if read_marker_or_none(directory, generation) is not None:
        raise GenerationExists(
            f"generation {generation} in {directory} is already complete; save generation "
            f"{generation + 1} (or a later one) instead"
        )
    gdir.mkdir(parents=True, exist_ok=True)
    _fsync_dir(gdir.parent)
    return gdir


def _save_distributed(directory, generation: int, state: Any, attempt: str | None, verify: bool) -> dict:
    """save_generation over torch.distributed: every rank writes, then rank 0 gathers the records through the
    collective (so no record left on disk by an earlier attempt can count), verifies the files and tells every
    rank the outcome; all ranks return the same marker or raise the same error."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            "save_generation without rank/world_size needs an initialised torch.distributed "
            "process group (or pass rank=, world_size=, attempt= for filesystem mode)"
        )
    rank, world_size = dist.get_rank(), dist.get_world_size()
    attempt = _check_attempt(attempt if attempt is not None else uuid.uuid4().hex)  # names this rank's temp files
    try:
        gdir = _prepare(directory, generation)
        mine: Any = _write_rank_file(gdir, generation, rank, world_size, attempt, state)
    except Exception as exc:  # noqa: BLE001 - reported to every rank below, so none is left waiting
        mine = f"rank {rank}: {type(exc).__name__}: {exc}"
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, mine)  # doubles as the barrier after every rank's write
    errors = [g for g in gathered if isinstance(g, str)]
    if errors:
        raise CheckpointError(f"generation {generation} not saved: {'; '.join(errors)}")
    outcome: list[Any] = [None]
    if rank == 0:
        try:
            outcome = [
                _write_marker(
                    gdir, generation, world_size, attempt, _verify_records(gdir, generation, gathered, verify)
                )
            ]
        except Exception as exc:  # noqa: BLE001 - every rank must hear of it, or they wait forever
            outcome = [f"{type(exc).__name__}: {exc}"]
    dist.broadcast_object_list(outcome, src=0)
    if isinstance(outcome[0], str):
        raise CheckpointError(f"rank 0 could not complete generation {generation}: {outcome[0]}")
    return outcome[0]


# ---- reading ------------------------------------------------------------------------------------------------


def _valid_marker(marker: dict | None, generation: int) -> bool:
    if marker is None or marker.get("format") != FORMAT or marker.get("generation") != generation:
        return False
    files, world = marker.get("files"), marker.get("world_size")
    return isinstance(files, dict) and isinstance(world, int) and set(files) == {str(r) for r in range(world)}


def read_marker_or_none(directory: str | os.PathLike, generation: int) -> dict | None:
    """The completion marker of `generation`, or None when the generation is incomplete or absent."""
    marker = _read_json(generation_dir(directory, generation) / MARKER)
    return marker if _valid_marker(marker, generation) else None


def read_marker(directory: str | os.PathLike, generation: int) -> dict:
    """The completion marker of `generation`; IncompleteGeneration when it has none."""
    marker = read_marker_or_none(directory, generation)
    if marker is None:
        raise IncompleteGeneration(
            f"generation {generation} in {directory} is not complete (no valid {MARKER}); "
            f"use latest_complete_generation() to find one that is"
        )
    return marker


def generations(directory: str | os.PathLike) -> list[int]:
    """Every generation folder under `directory`, complete or not, ascending."""
    root = Path(directory)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if p.is_dir() and (m := _GEN_RE.match(p.name)))


def complete_generations(directory: str | os.PathLike) -> list[int]:
    """The generations under `directory` that have a valid completion marker, ascending."""
    return [g for g in generations(directory) if read_marker_or_none(directory, g) is not None]


def latest_complete_generation(directory: str | os.PathLike, *, verify: bool = False) -> int | None:
    """The newest complete generation (None when there is none); with `verify`, also the newest whose files
    all still match their checksums."""
    for g in reversed(generations(directory)):
        marker = read_marker_or_none(directory, g)
        if marker is None:
            continue
        if verify:
            try:
                for rank in marker["files"]:
                    _verified_path(directory, g, marker, int(rank))
            except CheckpointCorrupt:
                continue
        return g
    return None


def _verified_path(directory, generation: int, marker: dict, rank: int) -> Path:
    entry = marker["files"].get(str(rank))
    if entry is None:
        raise CheckpointError(
            f"generation {generation} has ranks 0..{marker['world_size'] - 1}, not rank {rank}; "
            f"after a world-size change load a saved rank's file (the loader state is global)"
        )
    path = generation_dir(directory, generation) / entry["file"]
    if not path.is_file():
        raise CheckpointCorrupt(f"generation {generation}: {path} is listed in {MARKER} but missing")
    sha256, size = file_sha256(path)
    if (sha256, size) != (entry["sha256"], entry["bytes"]):
        raise CheckpointCorrupt(
            f"generation {generation}: {path} has sha256 {sha256} ({size} bytes), "
            f"{MARKER} says {entry['sha256']} ({entry['bytes']} bytes)"
        )
    return path


def load(
    directory: str | os.PathLike, generation: int, rank: int, *, map_location: Any = "cpu", weights_only: bool = True
) -> Any:
    """What `rank` saved in a complete `generation`, after checking its sha256 against the marker."""
    marker = read_marker(directory, generation)
    path = _verified_path(directory, generation, marker, rank)
    return torch.load(path, map_location=map_location, weights_only=weights_only)


def prune(directory: str | os.PathLike, keep: int) -> list[int]:
    """Delete all but the newest `keep` complete generations and every incomplete one older than the newest
    complete; returns the generations removed. Call from one rank, outside save_generation."""
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an int >= 1, got {keep!r}")
    complete = complete_generations(directory)
    if not complete:
        return []
    kept = set(complete[-keep:])
    newest = complete[-1]
    removed = [g for g in generations(directory) if g not in kept and g < newest]
    for g in removed:
        gdir = generation_dir(directory, g)
        (gdir / MARKER).unlink(missing_ok=True)  # first, so a half-removed generation is never read as complete
        shutil.rmtree(gdir, ignore_errors=True)
    return removed
