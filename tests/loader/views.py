"""Shared test data for the loader tests: one small real lakehouse per test process (built once, through
tests/run_view/builders.py: real Wikipedia paragraphs, real GPT-2 tokens, a real published run view), and
real GPT-2 token arrays for the pure packing/order tests."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from iceberg_catalog import CatalogConfig, Lakehouse, open_catalog
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES

GLOBAL_BATCH = 24  # divisible by every world size the issue names: 1, 2, 3, 4, 6, 8
SEQ_LEN = 64
N_DOCS = 60  # 9,375 GPT-2 tokens -> 147 sequences -> 7 global steps of 24 per epoch (21 padded sequences)


@lru_cache(maxsize=1)
def lakehouse() -> dict:
    """{"home", "a", "b"}: two published views (seed 0 and 1) over the same documents, row groups of 8."""
    from tests.run_view import builders

    home = Path(tempfile.mkdtemp(prefix="tokenlake-loader-"))
    atexit.register(shutil.rmtree, home, True)
    old = os.environ.get("TOKENLAKE_HOME")
    os.environ["TOKENLAKE_HOME"] = str(home)
    try:
        a = builders.published_view(n_docs=N_DOCS, seq_len=SEQ_LEN, seed=0, docs_per_row_group=8, name="loader-a")
        b = builders.published_view(n_docs=N_DOCS, seq_len=SEQ_LEN, seed=1, docs_per_row_group=8, name="loader-b")
    finally:
        if old is None:
            os.environ.pop("TOKENLAKE_HOME", None)
        else:
            os.environ["TOKENLAKE_HOME"] = old
    return {"home": home, "a": a, "b": b}


def handle() -> Lakehouse:
    """The shared lakehouse as a `Lakehouse` (no TOKENLAKE_HOME needed)."""
    return Lakehouse(CatalogConfig.embedded(lakehouse()["home"]))


def catalog():
    """The shared lakehouse's bare pyiceberg catalog: the loader also accepts one (it wraps it)."""
    return open_catalog(CatalogConfig.embedded(lakehouse()["home"]), create=False)


@lru_cache(maxsize=4)
def view(which: str = "a"):
    from loader import open_run_view

    return open_run_view(lakehouse()[which], catalog=handle())


@lru_cache(maxsize=1)
def bundle() -> Path:
    from loader import export_run_view

    return export_run_view(lakehouse()["a"], lakehouse()["home"] / "bundle-a", catalog=handle())


@lru_cache(maxsize=1)
def gpt2_docs(n: int = 40, max_chars: int = 600) -> tuple[np.ndarray, ...]:
    """Real GPT-2 token arrays (EOS 50256 appended) of real Wikipedia paragraphs."""
    from tokenizers import Tokenizer

    from tests.run_view import builders

    tok = Tokenizer.from_file(str(builders.GPT2))
    texts = [p[:max_chars] for p in builders.paragraphs()[:n]]
    return tuple(np.array([*e.ids, 50256], dtype=np.uint16) for e in tok.encode_batch(texts, add_special_tokens=False))


def run(loader, n: int | None = None) -> list[dict]:
    """Up to `n` batches of a loader (all when None)."""
    out = []
    for b in loader:
        out.append(b)
        if n is not None and len(out) == n:
            break
    return out


TENSORS = ("input_ids", "labels", "loss_mask", "position_ids", "segment_ids", "sequence_index")


def same_batch(x: dict, y: dict) -> bool:
    """Bit-for-bit equality of two batches (tensors, audit spans, step)."""
    return (
        x["step"] == y["step"]
        and x["documents"] == y["documents"]
        and all(torch.equal(x[k], y[k]) for k in (*TENSORS, "cu_seqlens"))
    )


def concat_ranks(parts: list[dict]) -> dict:
    """The global batch from the rank batches of one step, in rank order."""
    out = {k: torch.cat([p[k] for p in parts]) for k in TENSORS}
    out["documents"] = [d for p in parts for d in p["documents"]]
    out["step"] = parts[0]["step"]
    return out


def same_global(x: dict, y: dict) -> bool:
    return x["step"] == y["step"] and x["documents"] == y["documents"] and all(torch.equal(x[k], y[k]) for k in TENSORS)


def gloo_worker(rank: int, world: int, port: int, bundle_dir: str, out_dir: str, steps: int) -> None:
    """One rank of the real multi-process run: rank/world from torch.distributed (gloo), batches saved."""
    import torch.distributed as dist

    from loader import RunViewLoader, open_run_view

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        data = RunViewLoader(open_run_view(bundle=bundle_dir), GLOBAL_BATCH)
        batches = run(data, steps)
        total = torch.tensor([sum(int(b["input_ids"].numel()) for b in batches)])
        dist.all_reduce(total)  # the ranks really talk to each other
        torch.save(
            {
                "batches": [{k: b[k] for k in (*TENSORS, "documents", "step", "rank", "world_size")} for b in batches],
                "state": data.state_dict(),
                "total": int(total),
            },
            Path(out_dir) / f"rank{rank}.pt",
        )
    finally:
        dist.destroy_process_group()


@contextmanager
def without_layout_property(run_view_id: str, value: str | None = None):
    """run_view.samples without (or with `value` for) the view's layout property, as a view published before
    layouts existed (or with an altered pointer) has it; restored afterwards."""
    lh = handle()
    prop = contract.layout_property(run_view_id)
    old = lh.table(RUN_VIEW_SAMPLES).properties[prop]
    with lh.table(RUN_VIEW_SAMPLES).transaction() as tx:
        if value is None:
            tx.remove_properties(prop)
        else:
            tx.set_properties({prop: value})
    try:
        yield old
    finally:
        with lh.table(RUN_VIEW_SAMPLES).transaction() as tx:
            tx.set_properties({prop: old})
