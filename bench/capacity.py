"""Capacity plan from measured per-core rates: the demo's job sequence on a bench crawl, timed per step, then
projected to a whole Common Crawl crawl for N cores.

The bench crawl is every WARC file of the sample crawl (real Common Crawl and web-archive files) in one
segment, so per-run costs (Dagster run, plan, Iceberg commit) are paid once per step as in a real partition,
not once per file. (`--copies N` repeats the files: more work per run, but copies 2..N are exact duplicates
that the funnel rightly drops, so the steps after exact dedup see no more documents.) The run view step is
left out: it is one run over the kept documents' metadata, and the demo's mixture names the sample's crawls.

Every step runs in this process with the in-process executor (one core: tasks run one after another),
through the same Dagster jobs as `make demo`. Per step: wall and CPU seconds (this process + the extraction
workers), the units it processed, the data and metadata files it wrote (= S3 PUTs on an S3 warehouse). The
projection scales the per-record costs to a crawl (`--crawl-records`, default 3e9 response records: recent
Common Crawl crawls hold 2.5-3.5 billion pages in ~90,000 WARC files of ~1 GB, 100 segments: `--crawl-files`,
`--crawl-segments`) and divides by N cores times the scale-out efficiency of `bench/scaleout.py` (ratio on 2
nodes / 2), carried as its median and range (`--efficiency`, `--efficiency-range`: the `efficiency` and
`efficiency_range` of `bench/scaleout.py --json`). Defaults: median 0.94, the 3 rounds of `bench/scaleout.py` on an
idle machine (2026-12-07: 1.97x, 1.88x, 1.88x); range 0.54-0.985, every ratio measured so far, the idle rounds and
two single runs on a loaded machine (1.08x, 1.35x). Wall hours are a range, not one figure, and an optimistic one
at large core counts: the efficiency was measured on 2 nodes, not on thousands of cores.

`--rate STEP=R` replaces a step's per-core rate with R documents per CPU second measured by its own bench at
scale (near_dedup: `bench/dedup_scale.py`, end to end; exact_dedup: `bench/exact_incremental.py`; curate:
`bench/curate.py --real-pages`, per extractor), applied to every curated document: the sample's one-process run
of a global step measures its per-run overhead, not its rate on a crawl, and the sample's pages are not a
crawl's. Such a step's core-hours = the crawl's documents / R.

    python bench/capacity.py [--copies 1] [--cores 64,512,4096] [--rate near_dedup=R] [--json]

With --json, exactly one JSON object on its own line on stdout (everything else on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLE_CRAWL = ROOT / "data" / "sample_crawl"
CRAWL, SEGMENT = "BENCH-CAPACITY", "segment-0"
UNIT = {  # what one step's cost is counted per
    "raw_ingest": "records",
    "curate_models": "(once)",
    "curate": "documents",
    "minhash": "documents",
    "exact_dedup": "documents",
    "near_dedup": "documents",
    "register_tokenizer": "(once)",
    "tokenize": "tokens",
    "register_benchmark": "(once)",
    "decontaminate": "documents",
}


# what a --rate is applied to: every curated document (an upper bound for near dedup, which hashes only kept ones)
RATE_UNIT = {"near_dedup": "documents", "exact_dedup": "documents", "curate": "documents"}


def say(msg: str, quiet: bool) -> None:
    print(msg, file=sys.stderr if quiet else sys.stdout, flush=True)


def build_crawl(work: Path, copies: int) -> tuple[Path, int, int]:
    """`copies` copies of every sample WARC file in one segment; (root, files, bytes)."""
    warc_dir = work / "crawl" / "crawl-data" / CRAWL / "segments" / SEGMENT / "warc"
    warc_dir.mkdir(parents=True)
    files = nbytes = 0
    for i in range(copies):
        for src in sorted(SAMPLE_CRAWL.rglob("*.warc.gz")):
            shutil.copyfile(src, warc_dir / f"{i:03d}-{src.name}")
            files, nbytes = files + 1, nbytes + src.stat().st_size
    return work / "crawl", files, nbytes


def files_under(root: Path) -> tuple[set[str], set[str]]:
    """(data files, metadata files) under the warehouse."""
    data, meta = set(), set()
    for p in root.rglob("*"):
        if p.is_file():
            (meta if "/metadata/" in p.as_posix() else data).add(str(p))
    return data, meta


def cpu_seconds() -> float:
    """CPU seconds of this process and of its reaped children (extraction workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_steps(defs, instance, warehouse: Path, quiet: bool) -> dict[str, dict]:
    """Every step of the demo's sequence, timed: wall, CPU, runs, files written."""
    from orchestration import demo
    from orchestration.flow import STEPS

    out, segments = {}, []
    for step in STEPS:
        if step.reviewer or step.job not in UNIT:
            continue
        if step.job == "raw_ingest":
            demo.discover_segments(defs, instance)
            segments = sorted(instance.get_dynamic_partitions("crawl_segments"))
        config = None
        data0, meta0 = files_under(warehouse)
        w0, c0, runs = time.perf_counter(), cpu_seconds(), 0
        for key in demo.partition_keys(step, instance, segments):
            demo.run_job(defs, instance, step.job, key, config)
            runs += 1
        data1, meta1 = files_under(warehouse)
        out[step.job] = {
            "wall_s": round(time.perf_counter() - w0, 3),
            "cpu_s": round(cpu_seconds() - c0, 3),
            "runs": runs,
            "data_files_written": len(data1 - data0),
            "metadata_files_written": len(meta1 - meta0),
        }
    return out


def counts(lakehouse) -> dict[str, int]:
    """Units per step, read back from the tables."""
    import pyarrow.compute as pc

    from iceberg_catalog.schemas import CURATED_DOCUMENTS, RAW_WARC_RECORDS, TOKENIZED_DOCUMENTS

    tokens = lakehouse.scan(TOKENIZED_DOCUMENTS, ("n_tokens",))["n_tokens"]
    kept = lakehouse.scan(TOKENIZED_DOCUMENTS, ("doc_id",)).num_rows
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id",)).num_rows
    return {
        "records": lakehouse.scan(RAW_WARC_RECORDS, ("record_id",)).num_rows,
        "documents": docs,
        "tokens": int(pc.sum(tokens).as_py() or 0),
        "kept documents": kept,
    }


def plan_for(steps: dict, units: dict, measured_files: int, args) -> dict:
    """Per-core rates and the projection to a crawl of `args.crawl_records` response records in
    `args.crawl_files` WARC files and `args.crawl_segments` segments, on each core count. Work scales with the
    records (the funnel's ratios as measured); data files with the input files (each task writes its own files
    per table); metadata files with the commits (runs per segment, as measured)."""
    scale = args.crawl_records / units["records"]
    per_file = args.crawl_files / measured_files
    per_step, core_s, data_files, commit_files = {}, 0.0, 0, 0.0
    for job, s in steps.items():
        unit = UNIT[job]
        n = units.get(unit, 0) * (3 if job == "decontaminate" else 1)  # 3 benchmarks: each document 3 times
        once = unit == "(once)"
        crawl_core_s = s["cpu_s"] if once else s["cpu_s"] * scale
        if job in args.rate:  # measured at scale by its own bench
            unit, n = RATE_UNIT[job], units[RATE_UNIT[job]]
            crawl_core_s = n * scale / args.rate[job]
        files = 0 if once else round(s["data_files_written"] * per_file)
        core_s, data_files = core_s + crawl_core_s, data_files + files
        commit_files += s["metadata_files_written"] * (1 if once or job.endswith("_dedup") else args.crawl_segments)
        per_step[job] = {
            **s,
            "unit": unit,
            "units": n,
            "per_core_rate": args.rate.get(job) or (None if once or not s["cpu_s"] else round(n / s["cpu_s"], 1)),
            "rate_from": "bench at scale" if job in args.rate else "this run",
            "crawl_core_hours": round(crawl_core_s / 3600, 1),
            "crawl_data_files": files,
        }
    low, high = args.efficiency_range

    def wall_hours(cores: int, efficiency: float) -> float:
        return round(core_s / 3600 / (cores * efficiency), 1)

    wall = {
        str(n): {"median": wall_hours(n, args.efficiency), "range": [wall_hours(n, high), wall_hours(n, low)]}
        for n in args.cores
    }
    return {
        "scale": round(scale),
        "steps": per_step,
        "crawl": {
            "warc_files": args.crawl_files,
            "segments": args.crawl_segments,
            "records": args.crawl_records,
            "documents": round(units["documents"] * scale),
            "kept_documents": round(units["kept documents"] * scale),
            "tokens": round(units["tokens"] * scale),
            "tasks_per_segment_step": round(args.crawl_files / args.crawl_segments),
            "core_hours": round(core_s / 3600),
            "efficiency": args.efficiency,
            "efficiency_range": [low, high],
            "wall_hours_by_cores": wall,
            "s3_put_requests": data_files + round(commit_files),
            # every WARC read once (plus ranged resumes); every data file read about once downstream (footer
            # and row groups: ~2 GETs); metadata reads per commit are a few more per commit
            "s3_get_requests_estimate": args.crawl_files + 2 * data_files + 3 * round(commit_files),
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1, help="copies of each sample WARC file in the bench segment")
    ap.add_argument("--crawl-records", type=float, default=3.0e9, help="response records (pages) per crawl")
    ap.add_argument("--crawl-files", type=int, default=90_000, help="WARC files per crawl")
    ap.add_argument("--crawl-segments", type=int, default=100, help="segments (partitions) per crawl")
    ap.add_argument("--cores", type=lambda s: [int(x) for x in s.split(",")], default=[64, 512, 4096])
    ap.add_argument("--efficiency", type=float, default=0.94, help="median scale-out efficiency (bench/scaleout.py)")
    ap.add_argument(
        "--efficiency-range",
        type=lambda s: sorted(float(x) for x in s.split(",")),
        default=[0.54, 0.985],
        help="MIN,MAX scale-out efficiency (bench/scaleout.py's efficiency_range)",
    )
    ap.add_argument(
        "--rate",
        type=lambda s: s.split("=", 1),
        action="append",
        default=[],
        help="STEP=R: per-core rate measured by the step's own bench at scale (near_dedup, exact_dedup, curate)",
    )
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, the rest on stderr")
    args = ap.parse_args()
    args.rate = {step: float(r) for step, r in args.rate}
    unknown = set(args.rate) - set(RATE_UNIT)
    if unknown:
        ap.error(f"--rate takes {', '.join(RATE_UNIT)}; got {', '.join(sorted(unknown))}")
    quiet = args.json
    work = Path(tempfile.mkdtemp(prefix="tokenlake-capacity-"))
    try:
        os.environ["TOKENLAKE_HOME"] = str(work / "home")
        os.environ.pop("TOKENLAKE_CATALOG", None)
        os.environ["DAGSTER_HOME"] = str(work / "home" / "dagster")
        crawl, nfiles, nbytes = build_crawl(work, args.copies)
        say(f"bench crawl: {nfiles} WARC files, {nbytes / 1e6:.1f} MB in one segment", quiet)
        import dagster as dg

        from iceberg_catalog import Lakehouse
        from orchestration.definitions import build_defs
        from orchestration.instance import prepare_dagster_home

        prepare_dagster_home()
        defs = build_defs(str(crawl))
        real_stdout = sys.stdout
        sys.stdout = sys.stderr if quiet else sys.stdout  # the per-run lines of demo.run_job
        try:
            with dg.DagsterInstance.get() as instance:
                steps = run_steps(defs, instance, work / "home" / "warehouse", quiet)
        finally:
            sys.stdout = real_stdout
        units = counts(Lakehouse())
        plan = plan_for(steps, units, nfiles, args)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        peak_kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        result = {
            "bench": "capacity",
            "measured": {"warc_files": nfiles, "warc_bytes": nbytes, **units},
            "peak_rss_mib": round(peak),
            "peak_rss_children_mib": round(peak_kids),
            **plan,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"\nmeasured on {nfiles} files, {nbytes / 1e6:.1f} MB: {units}")
    print(f"{'step':<20}{'runs':>5}{'wall s':>9}{'cpu s':>9}  {'per-core rate':<30}{'core-h/crawl':>13}")
    for job, s in plan["steps"].items():
        rate = f"{s['per_core_rate']:,} {s['unit']}/s" if s["per_core_rate"] else s["unit"]
        print(f"{job:<20}{s['runs']:>5}{s['wall_s']:>9.1f}{s['cpu_s']:>9.1f}  {rate:<30}{s['crawl_core_hours']:>13,}")
    c = plan["crawl"]
    print(f"\ncrawl of {c['warc_files']:,} WARC files in {c['segments']} segments, {c['records']:,.0f} records:")
    print(f"  {c['documents']:,} HTML documents, {c['kept_documents']:,} kept")
    print(f"  {c['tokens']:,} tokens")
    print(f"  {c['core_hours']:,} core-hours; wall hours at scale-out efficiency {c['efficiency']} "
          f"({c['efficiency_range'][0]}-{c['efficiency_range'][1]}):")  # fmt: skip
    for n, h in c["wall_hours_by_cores"].items():
        print(f"    {int(n):>6,} cores: {h['median']:,} h ({h['range'][0]:,}-{h['range'][1]:,})")
    print(f"  S3: {c['s3_put_requests']:,} PUTs, ~{c['s3_get_requests_estimate']:,} GETs")
    print(f"  peak RSS: {result['peak_rss_mib']} MiB (this process), {result['peak_rss_children_mib']} MiB (a worker)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
