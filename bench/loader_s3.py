"""Loader bench on object storage: the same run view served from SeaweedFS S3 (loopback) through the node-local
cache, against the same view read from local files in the same run.

Input (untimed setup): the Wikipedia excerpt tokenized with the repo's GPT-2 tokenizer, `--docs` documents in
row groups of `--docs-per-row-group`, published as a run view (bench/loader.py's writer), exported as a bundle;
its token files uploaded to a SeaweedFS server started here (tests/cluster/servers.py, stopped by its PID).

1. local files (baseline), then S3 cold (empty cache) and S3 warm (a fresh reader over the filled cache):
   tokens/s after the first batch, cache hit rate, row-group fetch latency p50/p95/p99, bytes fetched.
2. the store slowed 10x: a throttling TCP proxy on loopback adds 10x the measured p50 fetch latency to every
   response and paces it at 1/10 of the measured bandwidth; the loader runs in a child process with a cache
   budget of `--slow-cache-row-groups` row groups: peak RSS (VmHWM) and the largest cache size seen are printed
   against their budgets, and the served sample ids must equal the local run's (it slows, never fails or skips).

    python bench/loader_s3.py [--docs 16384] [--docs-per-row-group 1024] [--steps 60] [--json]

Exits 1 when a measurement fails (sides disagree, a budget is exceeded, the server does not start).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import child_command, repo_env, run_json_child  # noqa: E402
from bench.common import BenchFailure, run_reported  # noqa: E402

RSS_BUDGET = 1 << 30  # host RAM the slow-store child may use, imports included


def served_digest(batches: list[dict]) -> str:
    h = hashlib.sha256()
    for b in batches:
        h.update(json.dumps([b["step"], list(b["sample_indices"])]).encode())
    return h.hexdigest()


def run_loader(bundle: Path, props: dict | None, steps: int, args, cache: Path | None, budget: int) -> dict:
    """Open the bundle (S3 when `props`), serve `steps` steps; tokens/s after the first batch and the metrics."""
    from loader import RunViewLoader, open_run_view
    from loader.storage import StorageConfig

    storage = StorageConfig(cache_dir=str(cache), cache_bytes=budget) if cache is not None else None
    view = open_run_view(bundle=bundle, io_properties=props or {}, storage=storage)
    data = RunViewLoader(view, args.global_batch, seq_len=args.seq_len)
    batches, tokens, first = [], 0, None
    peak_cache = 0
    t0 = time.perf_counter()
    for b in data:
        batches.append({"step": b["step"], "sample_indices": list(b["sample_indices"])})
        if first is None:
            first = time.perf_counter()
            cpu0 = time.process_time()  # every thread of this process (read-ahead, prefetch), after the first batch
        else:
            tokens += int(b["input_ids"].numel())
        if cache is not None and len(batches) % 4 == 0:
            from loader.storage import NodeCache

            peak_cache = max(peak_cache, NodeCache(cache, budget).bytes_used())
        if len(batches) == steps:
            break
    end = time.perf_counter()
    cpu_s = time.process_time() - cpu0
    m = data.metrics()
    return {
        "tokens_per_s": tokens / (end - first) if end > first else None,
        "first_batch_s": first - t0,
        "cpu_ns_per_token": cpu_s / tokens * 1e9 if tokens else None,
        "seconds": end - t0,
        "digest": served_digest(batches),
        "batches": len(batches),
        "peak_cache_bytes": max(peak_cache, m.get("cache_bytes", 0)),
        **{k: m.get(k) for k in ("cache_hit_rate", "fetches", "fetch_bytes", "fetch_seconds", "retries")},
        **{k: m.get(k) for k in ("fetch_latency_p50", "fetch_latency_p95", "fetch_latency_p99", "decode_seconds")},
        "corrupt_refetched": m.get("corrupt_refetched"),
        "cache_bytes": m.get("cache_bytes"),
        "peak_readahead_bytes": m.get("peak_readahead_bytes"),
    }


def child_slow(args) -> None:
    """The slow-store run in its own process (so its peak RSS is its own); prints JSON."""
    props = json.loads(args.props)
    out = run_loader(Path(args.bundle), props, args.steps, args, Path(args.cache), args.cache_budget)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["peak_rss_bytes"] = int(line.split()[1]) * 1024
    print(json.dumps(out))


def run_bench(work: Path, args) -> int:
    import pyarrow.parquet as pq

    from assets.tokenized.tokens import encode_documents, load_tokenizer
    from bench import loader as bl
    from iceberg_catalog import CatalogConfig, open_catalog
    from loader import export_run_view
    from tests.cluster.servers import seaweedfs_server
    from tests.loader.proxy import ThrottlingProxy

    t_setup = time.perf_counter()
    texts = bl.corpus_paragraphs()
    lt = load_tokenizer(bl.GPT2, "gpt2")
    arrays = encode_documents(lt, texts)
    home = work / "lake"
    rv = bl.write_lakehouse(home, texts, arrays, args.docs, args.docs_per_row_group, args.seq_len, lt)
    bundle = export_run_view(rv, work / "bundle", catalog=open_catalog(CatalogConfig.embedded(home), create=False))
    meta = json.loads((bundle / "run_view.json").read_text())
    rg_sizes = []
    for f in meta["token_files"]:
        md = pq.read_metadata(f.removeprefix("file://"))
        for g in range(md.num_row_groups):
            col = [md.row_group(g).column(c) for c in range(md.num_columns)]
            rg_sizes.extend(c.total_compressed_size for c in col if c.path_in_schema == "tokens")
    with seaweedfs_server() as sw:
        client = sw.client()
        urls = []
        for i, f in enumerate(meta["token_files"]):
            key = f"bench-loader-s3/tokens-{i:03d}.parquet"
            client.upload_file(f.removeprefix("file://"), sw.bucket, key)
            urls.append(f"s3://{sw.bucket}/{key}")
        s3_bundle = work / "bundle-s3"
        s3_bundle.mkdir()
        for name in ("manifest.json", "samples.parquet"):
            (s3_bundle / name).write_bytes((bundle / name).read_bytes())
        (s3_bundle / "run_view.json").write_text(json.dumps({**meta, "token_files": urls}))
        print(
            f"setup: {args.docs} documents in {len(rg_sizes)} row groups (tokens column {sum(rg_sizes):,} bytes), "
            f"run view {rv}, SeaweedFS S3 at {sw.s3_endpoint} (pid {sw.pid}); "
            f"{time.perf_counter() - t_setup:.0f} s (untimed)",
            flush=True,
        )
        big = 8 << 30
        local = run_loader(bundle, None, args.steps, args, None, big)
        cold = run_loader(s3_bundle, sw.s3_properties(), args.steps, args, work / "cache", big)
        warm = run_loader(s3_bundle, sw.s3_properties(), args.steps, args, work / "cache", big)
        for name, r in (("cold", cold), ("warm", warm)):
            if r["digest"] != local["digest"]:
                raise BenchFailure(f"S3 {name} served other samples than the local files")
        print("\n## 1. local files vs SeaweedFS S3 through the node cache")
        print(
            "| path | tokens/s (after 1st batch) | vs local | 1st batch s | cache hit rate | fetches | "
            "fetch p50 ms | p95 ms | p99 ms | retries | CPU ns/token |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )
        for name, r in (("local files", local), ("S3 cold", cold), ("S3 warm", warm)):
            ms = [f"{r[k] * 1000:.1f}" if r.get(k) is not None else "-" for k in ("fetch_latency_p50",
                  "fetch_latency_p95", "fetch_latency_p99")]  # fmt: skip
            rate = "-" if r["cache_hit_rate"] is None else f"{r['cache_hit_rate']:.2f}"
            print(
                f"| {name} | {r['tokens_per_s']:,.0f} | {r['tokens_per_s'] / local['tokens_per_s']:.2f}x | "
                f"{r['first_batch_s']:.2f} | {rate} | {r['fetches']} | {' | '.join(ms)} | {r['retries']} | "
                f"{r['cpu_ns_per_token']:.1f} |"
            )

        # 2. the store 10x slower ------------------------------------------------------------------------------
        p50 = cold["fetch_latency_p50"] or 0.005
        bandwidth = cold["fetch_bytes"] / cold["fetch_seconds"] if cold["fetch_seconds"] else 50e6
        port = int(sw.s3_endpoint.rsplit(":", 1)[1])
        budget = args.slow_cache_row_groups * max(rg_sizes) + 4096
        with ThrottlingProxy(port, latency_s=9 * p50, bytes_per_s=bandwidth / 10) as proxy:
            props = {**sw.s3_properties(), "s3.endpoint": proxy.endpoint}
            cmd = child_command(
                __file__,
                "slow",
                bundle=s3_bundle,
                props=json.dumps(props),
                cache=work / "cache-slow",
                cache_budget=budget,
                steps=args.steps,
                seq_len=args.seq_len,
                global_batch=args.global_batch,
            )
            slow, _, _ = run_json_child(cmd, repo_env(), "the slow-store child")
        print(
            f"\n## 2. the store 10x slower (proxy: +{9 * p50 * 1000:.1f} ms per response, "
            f"{bandwidth / 10 / 1e6:.1f} MB/s), cache budget {budget:,} bytes ({args.slow_cache_row_groups} row "
            f"groups), child process"
        )
        print("| | value | budget |\n|---|---:|---:|")
        vs_cold = slow["tokens_per_s"] / cold["tokens_per_s"]
        print(f"| tokens/s after 1st batch | {slow['tokens_per_s']:,.0f} ({vs_cold:.2f}x cold) | |")
        q = " / ".join(f"{slow[f'fetch_latency_p{n}'] * 1000:.1f}" for n in (50, 95, 99))
        print(f"| fetch p50 / p95 / p99 ms | {q} | |")
        print(f"| peak RSS | {slow['peak_rss_bytes']:,} | {RSS_BUDGET:,} |")
        print(f"| peak cache bytes on disk | {slow['peak_cache_bytes']:,} | {budget:,} |")
        print(f"| peak read-ahead bytes | {slow['peak_readahead_bytes']:,} | {budget // 2:,} + reads in flight |")
        print(f"| batches, same samples as local | {slow['batches']}, {slow['digest'] == local['digest']} | |")
        if slow["digest"] != local["digest"] or slow["batches"] != local["batches"]:
            raise BenchFailure("the slow store run served other samples (or fewer) than the local files")
        if slow["peak_rss_bytes"] > RSS_BUDGET or slow["peak_cache_bytes"] > budget:
            raise BenchFailure("a budget was exceeded in the slow store run")
    result = {
        "local_tokens_per_s": local["tokens_per_s"],
        "s3_cold_tokens_per_s": cold["tokens_per_s"],
        "s3_warm_tokens_per_s": warm["tokens_per_s"],
        "s3_cold_ratio_vs_local": cold["tokens_per_s"] / local["tokens_per_s"],
        "s3_warm_ratio_vs_local": warm["tokens_per_s"] / local["tokens_per_s"],
        "local_cpu_ns_per_token": local["cpu_ns_per_token"],
        "s3_cold_cpu_ns_per_token": cold["cpu_ns_per_token"],
        "s3_warm_cpu_ns_per_token": warm["cpu_ns_per_token"],
        "load_average_1m": os.getloadavg()[0],
        "cold_cache_hit_rate": cold["cache_hit_rate"],
        "warm_cache_hit_rate": warm["cache_hit_rate"],
        "fetch_latency_p50_s": cold["fetch_latency_p50"],
        "fetch_latency_p95_s": cold["fetch_latency_p95"],
        "fetch_latency_p99_s": cold["fetch_latency_p99"],
        "slow_tokens_per_s": slow["tokens_per_s"],
        "slow_fetch_latency_p50_s": slow["fetch_latency_p50"],
        "slow_peak_rss_bytes": slow["peak_rss_bytes"],
        "rss_budget_bytes": RSS_BUDGET,
        "slow_peak_cache_bytes": slow["peak_cache_bytes"],
        "slow_cache_budget_bytes": budget,
        "slow_same_samples": slow["digest"] == local["digest"],
        "steps": args.steps,
        "row_groups": len(rg_sizes),
    }
    if args.json:
        print(json.dumps(result, sort_keys=True), file=JSON_OUT, flush=True)
    return 0


JSON_OUT = sys.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=16_384)
    p.add_argument("--docs-per-row-group", type=int, default=1024)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--slow-cache-row-groups", type=int, default=6)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (tables go to stderr)")
    p.add_argument("--child", choices=["slow"], help=argparse.SUPPRESS)
    p.add_argument("--bundle", help=argparse.SUPPRESS)
    p.add_argument("--props", help=argparse.SUPPRESS)
    p.add_argument("--cache", help=argparse.SUPPRESS)
    p.add_argument("--cache-budget", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "slow":
        child_slow(args)
        return 0
    if args.json:
        global JSON_OUT
        JSON_OUT, sys.stdout = sys.stdout, sys.stderr
    tempfile.tempdir = None
    return run_reported("loader-s3", lambda work: run_bench(work, args), missing_input_exit=2)


if __name__ == "__main__":
    sys.exit(main())
