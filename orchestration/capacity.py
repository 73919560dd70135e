"""`tokenlake capacity`: what a training run will ask of the storage path, next to what it delivers.

Demand (the seed's formula): bytes/s = global batch tokens x bytes per token / (step time x headroom), with bytes
per token MEASURED from the view's token files (the stored, compressed `tokens` column over the tokens it holds),
never taken from a data sheet. Per rank: global batch tokens / world size / (step time x headroom) tokens/s.

Achieved: a short soak on the configured storage path (the catalog's FileIO: local files or s3://, through the
node-local cache when `--cache-dir` is given): rank 0 of the world size reads `--soak-steps` steps in this
process; tokens/s after the first batch, and the bytes/s it fetched. The verdict compares per-rank rates.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def view_bytes_per_token(view) -> tuple[float, int, int]:
    """(stored bytes per token, stored bytes of the tokens column, tokens) over the view's token files."""
    source = view.source
    if not hasattr(source, "files"):
        raise ValueError(f"run view {view.run_view_id} has no token files to measure (an in-memory view)")
    from loader.storage import RowGroupReader

    reader = RowGroupReader(source.io_properties, source.storage)
    stored = 0
    for path in source.files:
        md, _ = reader.footer(path)
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            stored += sum(
                rg.column(c).total_compressed_size
                for c in range(rg.num_columns)
                if rg.column(c).path_in_schema == "tokens"
            )
    tokens = int(view.tokens_per_epoch)
    return stored / tokens, stored, tokens


def soak(view, global_batch_size: int, world_size: int, steps: int) -> dict:
    """Rank 0 of `world_size` reads `steps` steps here: tokens/s after the first batch, bytes/s fetched."""
    from loader import RunViewLoader

    data = RunViewLoader(view, global_batch_size, rank=0, world_size=world_size)
    tokens, first, n = 0, None, 0
    for b in data:
        n += 1
        if first is None:
            first = time.perf_counter()
            base = data.metrics()
        else:
            tokens += int(b["input_ids"].numel())
        if n == steps:
            break
    seconds = time.perf_counter() - first if first is not None else 0.0
    m = data.metrics()
    fetched = (m.get("fetch_bytes") or 0) - (base.get("fetch_bytes") or 0) if first is not None else 0
    return {
        "steps": n,
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "fetch_bytes_per_s": fetched / seconds if seconds > 0 else None,
        "cache_hit_rate": m.get("cache_hit_rate"),
        "fetch_latency_p99": m.get("fetch_latency_p99"),
        "data_wait_fraction": m.get("data_wait_fraction"),
    }


def plan(args: argparse.Namespace) -> dict:
    """The capacity report as a dict (demand, achieved, verdict)."""
    from loader import open_run_view
    from loader.storage import StorageConfig

    if not 0 < args.headroom <= 1:
        raise ValueError(f"--headroom must be in (0, 1], got {args.headroom}")
    if args.step_time <= 0 or args.world_size < 1:
        raise ValueError("--step-time must be > 0 and --world-size >= 1")
    storage = StorageConfig(cache_dir=args.cache_dir) if args.cache_dir else None
    view = open_run_view(args.run_view, storage=storage)
    seq_len = int(view.packing["seq_len"])
    gbs = args.global_batch_size or 8 * args.world_size
    batch_tokens = gbs * seq_len
    bpt, stored, tokens = view_bytes_per_token(view)
    demand_bytes = batch_tokens * bpt / (args.step_time * args.headroom)
    demand_rank = batch_tokens / args.world_size / (args.step_time * args.headroom)
    achieved = soak(view, gbs, args.world_size, args.soak_steps)
    ok = achieved["tokens_per_s"] is not None and achieved["tokens_per_s"] >= demand_rank
    return {
        "run_view_id": view.run_view_id,
        "storage": "s3" if any(f.startswith("s3") for f in view.source.files) else "local",
        "global_batch_size": gbs,
        "seq_len": seq_len,
        "global_batch_tokens": batch_tokens,
        "world_size": args.world_size,
        "step_time_s": args.step_time,
        "headroom": args.headroom,
        "bytes_per_token": bpt,
        "stored_token_bytes": stored,
        "tokens": tokens,
        "demand_bytes_per_s": demand_bytes,
        "demand_tokens_per_s_per_rank": demand_rank,
        "achieved": achieved,
        "achieved_over_demand": (achieved["tokens_per_s"] or 0) / demand_rank,
        "enough": ok,
    }


def cmd_capacity(args: argparse.Namespace) -> int:
    """Print the demand next to the achieved rate; exit 0 when the storage path keeps up, 3 when it does not."""
    try:
        r = plan(args)
    except Exception as exc:  # noqa: BLE001 - a CLI: the loader's named errors say what to do
        print(f"tokenlake capacity: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(r, sort_keys=True))
        return 0 if r["enough"] else 3
    a = r["achieved"]
    bpt = r["bytes_per_token"]
    print(f"run view {r['run_view_id']} ({r['storage']}): {r['tokens']:,} tokens, {bpt:.3f} bytes/token stored")
    print(
        f"demand: {r['global_batch_tokens']:,} tokens/step / ({r['step_time_s']} s x headroom {r['headroom']}) = "
        f"{r['demand_bytes_per_s'] / 1e6:,.2f} MB/s for the world of {r['world_size']}, "
        f"{r['demand_tokens_per_s_per_rank']:,.0f} tokens/s per rank"
    )
    rate = "n/a" if a["tokens_per_s"] is None else f"{a['tokens_per_s']:,.0f}"
    fetched = "n/a" if a["fetch_bytes_per_s"] is None else f"{a['fetch_bytes_per_s'] / 1e6:,.2f} MB/s fetched"
    print(f"achieved (soak, rank 0, {a['steps']} steps): {rate} tokens/s per rank, {fetched}")
    print(f"verdict: {'enough' if r['enough'] else 'NOT enough'} ({r['achieved_over_demand']:.2f}x the demand)")
    return 0 if r["enough"] else 3


def add_parser(sub) -> None:
    """Register `tokenlake capacity` on the CLI's subparsers."""
    p = sub.add_parser("capacity", help="storage demand of a training run vs the rate a short soak achieves")
    p.add_argument("--run-view", required=True, help="a published run view id")
    p.add_argument("--step-time", type=float, required=True, help="seconds per optimizer step")
    p.add_argument("--world-size", type=int, required=True, help="data-parallel ranks")
    p.add_argument("--headroom", type=float, default=0.7, help="share of the step the input may use (eta)")
    p.add_argument("--global-batch-size", type=int, default=None, help="sequences per step (default 8 x world)")
    p.add_argument("--soak-steps", type=int, default=20, help="steps read by the soak")
    p.add_argument("--cache-dir", default=None, help="node-local cache for s3:// token files")
    p.add_argument("--json", action="store_true", help="one JSON object on one line")
    p.set_defaults(fn=cmd_capacity)
