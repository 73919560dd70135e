"""The loader's state: one global cursor, and the fingerprint of what that cursor is only valid for.

State (`make_state`): {"format", "state_version", "run_view_id", "global_step" (global steps consumed: the one
cursor, the same on every rank, independent of world size and workers), "epoch" (informational), "fingerprint"
{manifest_sha256, tokenizer_id, packing, seed, state_version, order, global_batch_size}, "fingerprint_sha256"}.
`check_state` refuses, with a named `StateMismatch` subclass, a state from another run view, manifest, tokenizer,
seed, packing, global batch size or state/order version. The world size and the number of workers are *not* in
the state: resuming on any world size dividing G continues with global batch `global_step` (elastic resume).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from loader.errors import (
    GlobalBatchSizeMismatch,
    MalformedState,
    ManifestMismatch,
    PackingMismatch,
    RunViewMismatch,
    SeedMismatch,
    StateMismatch,
    StateVersionMismatch,
    TokenizerMismatch,
)
from loader.order import ORDER_VERSION
from loader.plan import BatchPlan

STATE_FORMAT = "tokenlake.loader_state"
STATE_VERSION = 1

# What must match for a state to resume on a plan, checked in this order: (in the state itself or in its
# fingerprint, the field, the error, its message). Each field is compared for equality with the plan's value
# (`_expected`); the message gets `got` (the state's), `want` (the plan's) and `run_view_id` (the plan's).
_MATCHES: tuple[tuple[str, str, type[StateMismatch], str], ...] = (
    *(
        (
            where,
            "state_version",
            StateVersionMismatch,
            f"loader state version {{got!r}} (in its {where}) is not {{want}}; "
            "it was written by another loader version: resume with that version",
        )
        for where in ("state", "fingerprint")
    ),
    (
        "fingerprint",
        "order",
        StateVersionMismatch,
        "loader state was saved with order {got!r}, this loader serves {want!r}: the global batches would differ",
    ),
    (
        "state",
        "run_view_id",
        RunViewMismatch,
        "loader state belongs to run view {got!r}, this loader serves {want!r}; "
        "open the run view the checkpoint was trained on",
    ),
    (
        "fingerprint",
        "manifest_sha256",
        ManifestMismatch,
        "loader state has manifest sha256 {got!r}, run view {run_view_id} has {want!r}",
    ),
    (
        "fingerprint",
        "tokenizer_id",
        TokenizerMismatch,
        "loader state was saved with tokenizer {got!r}, this run view uses {want!r}",
    ),
    (
        "fingerprint",
        "seed",
        SeedMismatch,
        "loader state was saved with seed {got!r}, this loader uses {want}; pass seed={got!r} to resume that run",
    ),
    (
        "fingerprint",
        "packing",
        PackingMismatch,
        "loader state was saved with packing {got!r}, this loader packs {want!r}",
    ),
    (
        "fingerprint",
        "global_batch_size",
        GlobalBatchSizeMismatch,
        "loader state was saved with global batch size {got!r}, this loader uses {want}: global batch k would "
        "hold other sequences; keep the global batch size and change only the world size",
    ),
)


def fingerprint(plan: BatchPlan) -> dict:
    """What a saved cursor is only valid for."""
    return {
        "manifest_sha256": plan.view.manifest_sha256,
        "tokenizer_id": plan.view.tokenizer_id,
        "packing": plan.packing,
        "seed": plan.seed,
        "state_version": STATE_VERSION,
        "order": ORDER_VERSION,
        "global_batch_size": plan.global_batch_size,
    }


def fingerprint_sha256(fingerprint: Mapping) -> str:
    """sha256 of the canonical JSON of a fingerprint."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def make_state(plan: BatchPlan, global_step: int) -> dict:
    """The loader state at a global cursor (global steps consumed)."""
    fp = fingerprint(plan)
    return {
        "format": STATE_FORMAT,
        "state_version": STATE_VERSION,
        "run_view_id": plan.view.run_view_id,
        "global_step": int(global_step),
        "epoch": int(global_step) // plan.schedule.steps_per_epoch,
        "fingerprint": fp,
        "fingerprint_sha256": fingerprint_sha256(fp),
    }


def _expected(plan: BatchPlan) -> dict[str, Mapping]:
    """The plan's side of `_MATCHES`: what the state itself and what its fingerprint must hold."""
    return {
        "state": {"state_version": STATE_VERSION, "run_view_id": plan.view.run_view_id},
        "fingerprint": fingerprint(plan),
    }


def check_state(plan: BatchPlan, state: Mapping) -> int:
    """The global cursor of `state` after checking it belongs to `plan`; named StateMismatch errors otherwise."""
    if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
        found = state.get("format") if isinstance(state, Mapping) else type(state).__name__
        raise MalformedState(f"not a tokenlake loader state (format {found!r}, expected {STATE_FORMAT!r})")
    fp = state.get("fingerprint")
    if not isinstance(fp, Mapping) or not isinstance(state.get("global_step"), int):
        raise MalformedState("loader state lacks a fingerprint mapping or an integer global_step")
    saved, expected = {"state": state, "fingerprint": fp}, _expected(plan)
    for where, name, error, message in _MATCHES:
        got, want = saved[where].get(name), expected[where][name]
        if got != want:
            raise error(message.format(got=got, want=want, run_view_id=plan.view.run_view_id))
    step = state["global_step"]
    total = plan.schedule.total_steps
    if step < 0 or (total is not None and step > total):
        raise MalformedState(f"loader state cursor {step} is outside 0..{total}")
    return step
