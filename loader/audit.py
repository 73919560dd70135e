"""Audit: rebuild any served batch offline, digest it, and find where a document was served.

Every batch the loader serves carries run_view_id, the global step, the epoch and per sequence the list of
(doc_id, token_start, token_end) it packs (loader.dataset). Because the whole plan is a pure function of
(run view, seed, packing, global batch size), `reconstruct_batch` needs nothing from the training run but
those numbers: it opens the view (lakehouse or exported bundle), recomputes the order and reads the same
tokens. `steps_serving` answers the provenance question "at which global steps is doc X served" by
arithmetic on token counts alone (no token reads).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from loader.plan import BatchPlan
from loader.read_ahead import SegmentReader
from loader.view import RunView, open_run_view

_DIGEST_TENSORS = ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids", "cu_seqlens")


def reconstruct_batch(
    run_view_id: str | None,
    step: int,
    global_batch_size: int,
    seq_len: int | None = None,
    *,
    view: RunView | None = None,
    catalog: Any = None,
    bundle: str | Path | None = None,
    seed: int | None = None,
    cross_document_attention: str | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> dict[str, Any]:
    """The batch served at global `step` (the whole global batch by default, or one rank's slice), rebuilt from
    the run view alone; bit for bit what the loader served with the same arguments. `catalog`: a `Lakehouse`
    or a pyiceberg catalog (see `open_run_view`)."""
    if view is None:
        view = open_run_view(run_view_id, catalog=catalog, bundle=bundle)
    elif run_view_id is not None and run_view_id != view.run_view_id:
        raise ValueError(f"view {view.run_view_id} given for run_view_id {run_view_id}")
    plan = BatchPlan(
        view, global_batch_size, seed=seed, seq_len=seq_len, cross_document_attention=cross_document_attention
    )
    return SegmentReader(plan).batch(step, rank, world_size)


def batch_digest(batch: Mapping[str, Any]) -> str:
    """sha256 over a batch's tensors (int64 little-endian) and its audit spans: equal digests, equal batches."""
    h = hashlib.sha256()
    h.update(f"{batch['run_view_id']}|{batch['step']}|".encode())
    for name in _DIGEST_TENSORS:
        h.update(name.encode())
        h.update(np.ascontiguousarray(batch[name].numpy().astype("<i8")).tobytes())
    h.update(json.dumps(list(batch["documents"]), separators=(",", ":")).encode())
    return h.hexdigest()


def audit_record(batch: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-ready audit part of a batch (log it per step): ids, step, spans and the digest."""
    return {
        "run_view_id": batch["run_view_id"],
        "step": batch["step"],
        "epoch": batch["epoch"],
        "rank": batch["rank"],
        "world_size": batch["world_size"],
        "sequence_index": batch["sequence_index"].tolist(),
        "documents": [[list(p) for p in seq] for seq in batch["documents"]],
        "digest": batch_digest(batch),
    }


class ServedSpan(NamedTuple):
    """One piece of a document in the served stream."""

    epoch: int
    step: int  # global step
    position_in_batch: int  # 0..G-1; rank r of W serves positions [r*G/W, (r+1)*G/W)
    sequence_index: int  # within the epoch
    sample_index: int
    token_start: int
    token_end: int


def steps_serving(
    view: RunView,
    doc_id: str,
    global_batch_size: int,
    epochs: Iterable[int] = (0,),
    *,
    seed: int | None = None,
    seq_len: int | None = None,
) -> list[ServedSpan]:
    """Every span of `doc_id` (all its repetitions) served in `epochs`, in serving order; [] if not in the view."""
    plan = BatchPlan(view, global_batch_size, seed=seed, seq_len=seq_len, epochs=None)
    samples = [i for i, d in enumerate(view.doc_ids) if d == doc_id]
    L, G = plan.seq_len, plan.global_batch_size
    spe = plan.schedule.steps_per_epoch
    out = []
    for epoch in epochs:
        order, offsets = plan.epoch_layout(int(epoch))
        position = np.empty(len(order), dtype=np.int64)
        position[order] = np.arange(len(order))
        for s in samples:
            p = int(position[s])
            start, end = int(offsets[p]), int(offsets[p + 1])
            for i in range(start // L, (end - 1) // L + 1):
                a, b = max(start, i * L) - start, min(end, (i + 1) * L) - start
                out.append(ServedSpan(int(epoch), int(epoch) * spe + i // G, i % G, i, s, a, b))
    return sorted(out, key=lambda r: (r.epoch, r.sequence_index, r.token_start))
