"""Curate throughput on a Ray cluster: 2 worker nodes vs 1, same input, over `--rounds` rounds.

A loopback Ray cluster (head 127.0.0.2 with no CPU for tasks; workers 127.0.0.3 and .4, 1 CPU each, token
auth, stopped by PID) and a temp TOKENLAKE_HOME. The raw partition is ingested once in-process from
`--copies` copies of the sample crawl's largest WARC file (one curate task per file). Each round starts its own
cluster, times the curate map (`curate.run_task` through the Ray executor, the same map the curated/documents
asset runs) with one worker node, adds a second node, and times it again. Each phase runs `--repeats` times
and keeps the fastest (the first run also starts the worker processes and loads the models). Documents = the
HTML records curated; every phase of every round must give the same per-task stats.

One round is not a figure: on a shared 2-core machine single runs gave 1.77x, 1.08x and 1.35x. The ratio is
reported as the median and the range over the rounds, and so is the efficiency (ratio / 2 nodes) that
`bench/capacity.py --efficiency` takes.

    python bench/scaleout.py [--copies 4] [--repeats 2] [--rounds 3] [--json]

With --json, exactly one JSON object on its own line on stdout (everything else on stderr): `ratio` (the
median), `ratio_range` [min, max], `efficiency`, `efficiency_range` and `per_round`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SAMPLE_CRAWL = ROOT / "data" / "sample_crawl"
CRAWL, SEGMENT = "BENCH", "scaleout"


def say(msg: str, to_stderr: bool) -> None:
    print(msg, file=sys.stderr if to_stderr else sys.stdout, flush=True)


def ingest_copies(work: Path, copies: int) -> int:
    """`copies` copies of the largest sample WARC file into one raw partition (in-process). Returns rows."""
    from assets.raw import ingest
    from iceberg_catalog import Lakehouse, Provenance, config_hash

    src = max(SAMPLE_CRAWL.rglob("*.warc.gz"), key=lambda p: p.stat().st_size)
    warc_dir = work / "crawl"
    warc_dir.mkdir(parents=True)
    files = []
    for i in range(copies):
        dst = warc_dir / f"{i:03d}-{src.name}"
        shutil.copyfile(src, dst)
        files.append(dst.as_uri())
    lakehouse, run = Lakehouse(), uuid.uuid4().hex
    source = ingest.SegmentSource(CRAWL, SEGMENT, tuple(files), "bench", datetime.now(UTC))
    params = ingest.IngestParams()
    results = [ingest.run_task(t) for t in ingest.plan(lakehouse, source, params, run)]
    prov = Provenance("raw/bench", f"{CRAWL}/{SEGMENT}", run, "bench", config_hash(params.hashed()))
    ingest.commit(lakehouse, source, results, {t: prov for t in ingest.TABLES})
    return lakehouse.scan(ingest.RAW_WARC_RECORDS, ("record_id",)).num_rows


def timed_curate(executor, lm_path: str, repeats: int) -> tuple[float, int, list]:
    """The fastest of `repeats` curate maps: (seconds, HTML documents, per-task stats in task order)."""
    from assets.curated import curate
    from assets.curated.pipeline import CurateParams
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import RAW_WARC_RECORDS

    lakehouse = Lakehouse()
    snapshot = lakehouse.snapshot_id(RAW_WARC_RECORDS)
    best, docs, stats = float("inf"), 0, []
    for _ in range(repeats):
        tasks = curate.plan(lakehouse, snapshot, CRAWL, SEGMENT, CurateParams(), lm_path, uuid.uuid4().hex)
        t0 = time.perf_counter()
        results = executor.map(curate.run_task, tasks)
        best = min(best, time.perf_counter() - t0)
        results.sort(key=lambda r: r.task_index)
        docs = sum(r.stats["html"] for r in results)
        stats = [{k: v for k, v in r.stats.items() if k != "perplexities"} for r in results]
    return best, docs, stats


def timed_round(lm_path: str, repeats: int, quiet: bool) -> dict[int, dict]:
    """One round on a cluster of its own: the curate map on one worker node, then on two. Per node count:
    seconds, docs, docs_per_s, tasks_per_node and the per-task stats (which every phase must repeat)."""
    from resources.executor import RayExecutor, disconnect_ray
    from tests.cluster.ray_cluster import WORKER_IPS, ray_cluster

    phases = {}
    with ray_cluster(workers=1, cpus_per_node=1, head_cpus=0) as cluster:
        os.environ.update(cluster.env)
        try:
            for nodes in (1, 2):
                if nodes == 2:
                    cluster.add_worker(WORKER_IPS[1], 1)
                ex = RayExecutor(cluster.address, max_retries=1)
                seconds, docs, stats = timed_curate(ex, lm_path, repeats)
                phases[nodes] = {
                    "seconds": round(seconds, 3),
                    "docs": docs,
                    "docs_per_s": round(docs / seconds, 2),
                    "tasks_per_node": dict(ex.tasks_per_node),
                    "stats": stats,
                }
                say(f"  {nodes} worker node(s): {docs} docs in {seconds:.2f} s = {docs / seconds:.1f} docs/s, "
                    f"tasks per node {dict(ex.tasks_per_node)}", quiet)  # fmt: skip
        finally:
            disconnect_ray()
    return phases


def spread(values: list[float]) -> tuple[float, list[float]]:
    """(median, [min, max]), rounded to 3 places."""
    return round(statistics.median(values), 3), [round(min(values), 3), round(max(values), 3)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=4, help="copies of the largest sample WARC file (= tasks)")
    ap.add_argument("--repeats", type=int, default=2, help="timed maps per phase (the fastest is kept)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, each on a fresh cluster (median and range)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, the rest on stderr")
    args = ap.parse_args()
    quiet = args.json

    from assets.curated.models import REFERENCE_CORPUS
    from assets.curated.ngram_lm import build_reference_lm

    rounds, first_stats = [], None
    with tempfile.TemporaryDirectory(prefix="tl-scaleout-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        os.environ["TOKENLAKE_HOME"] = str(work / "home")
        os.environ.pop("TOKENLAKE_CATALOG", None)
        lm_path = str(work / "reference_lm.arpa")
        build_reference_lm(REFERENCE_CORPUS, Path(lm_path), order=3)
        rows = ingest_copies(work, args.copies)
        say(f"raw: {rows} records in {args.copies} WARC files", quiet)
        for r in range(args.rounds):
            say(f"round {r + 1} of {args.rounds}:", quiet)
            phases = timed_round(lm_path, args.repeats, quiet)
            stats = [p.pop("stats") for p in phases.values()]
            first_stats = first_stats or stats[0]
            if any(s != first_stats for s in stats):
                say("FAIL: the phases curated different documents", quiet)
                return 1
            ratio = phases[2]["docs_per_s"] / phases[1]["docs_per_s"]
            say(f"  ratio 2 nodes / 1 node: {ratio:.2f}x", quiet)
            rounds.append({"ratio": round(ratio, 3), "nodes_1": phases[1], "nodes_2": phases[2]})
    ratio, ratio_range = spread([r["ratio"] for r in rounds])
    efficiency, efficiency_range = spread([r["ratio"] / 2 for r in rounds])
    say(f"scale-out ratio (2 nodes / 1 node) over {len(rounds)} round(s): median {ratio:.2f}x, range "
        f"{ratio_range[0]:.2f}-{ratio_range[1]:.2f}x; efficiency {efficiency:.3f} "
        f"({efficiency_range[0]:.3f}-{efficiency_range[1]:.3f})", quiet)  # fmt: skip
    if args.json:
        out = {
            "bench": "scaleout",
            "copies": args.copies,
            "tasks": args.copies,
            "rounds": len(rounds),
            "ratio": ratio,
            "ratio_range": ratio_range,
            "efficiency": efficiency,
            "efficiency_range": efficiency_range,
            "per_round": rounds,
        }
        print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
