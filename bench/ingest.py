"""Raw ingest throughput and memory: the `raw_warc_ingest` asset vs a bare warcio loop, in the same run.

1. Throughput on the repo's sample crawl (all partitions): wall time of the Dagster materialisations
   (`raw_ingest` job, in-process, Iceberg commits included) vs `for rec in ArchiveIterator(f):
   rec.raw_stream.read()` over the same files. Median of `--repeats` rounds after one warm-up round.
2. Peak RSS on the sample crawl (1x) and on a copy whose every WARC file is 10 copies of itself (10x), one
   fresh subprocess per measurement (peak = the child's VmHWM). Default config first, then a small
   `batch_bytes`; the bare loop for reference.

    python bench/ingest.py [--repeats 3] [--copies 10] [--small-batch-mib 4] [--crawl data/sample_crawl]

Everything is written under a temp TOKENLAKE_HOME / DAGSTER_HOME (never ./.tokenlake). Exits 1 when a
materialisation fails, the asset sees a different number of records or responses than warcio, or peak RSS
with the small batch grows more than 1.25x on the 10x input.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import child_command, repo_env, run_json_child  # noqa: E402
from bench.common import BenchFailure, make_copies, run_reported, vm_hwm_kib, warc_paths  # noqa: E402

SAMPLE_CRAWL = ROOT / "data" / "sample_crawl"
MAX_FLAT_RATIO = 1.25  # RSS 10x / RSS 1x above this with a small batch means memory grows with the input
QUIET_LOGGERS = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def bare_pass(paths: list[Path]) -> dict:
    """The baseline: warcio reads every record's bytes; nothing is parsed, hashed or stored."""
    from warcio.archiveiterator import ArchiveIterator

    records = responses = 0
    response_bytes: dict[str, int] = {}  # per segment directory
    t0 = time.perf_counter()
    for path in paths:
        segment = str(path.parent.parent)
        with open(path, "rb") as fh:
            for rec in ArchiveIterator(fh):
                n = len(rec.raw_stream.read())
                records += 1
                if rec.rec_type == "response":
                    responses += 1
                    response_bytes[segment] = response_bytes.get(segment, 0) + n
    return {
        "seconds": time.perf_counter() - t0,
        "records": records,
        "responses": responses,
        "max_segment_response_bytes": max(response_bytes.values(), default=0),
    }


def use_temp_home(home: Path, crawl_root: Path) -> None:
    """Point the catalog, Dagster and the crawl source at `home` / `crawl_root` (before importing defs)."""
    os.environ["TOKENLAKE_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    os.environ["TOKENLAKE_CRAWL_ROOT"] = str(crawl_root)
    os.environ.pop("TOKENLAKE_CATALOG", None)  # else a user's catalog file would receive the bench's commits


def _records_by_type(md: str) -> int:
    """Total of the `records_by_type` Markdown table the asset attaches (rows `| type | n |`)."""
    return sum(int(m.group(1)) for m in re.finditer(r"^\|[^|]+\|\s*(\d+)\s*\|$", md, flags=re.M))


class AssetRunner:
    """The `raw_ingest` job of the project's Definitions on a local instance, one partition per segment."""

    def __init__(self) -> None:
        import dagster as dg

        from orchestration.definitions import defs
        from orchestration.instance import prepare_dagster_home

        prepare_dagster_home()
        self.instance = dg.DagsterInstance.get()
        self.job = defs.resolve_job_def("raw_ingest")
        self.keys = [ref.partition_key for ref in defs.resources["crawl_source"].list_segments()]
        self.instance.add_dynamic_partitions("crawl_segments", self.keys)

    def run_all(self, op_config: dict | None = None) -> dict:
        """Materialise every partition; wall seconds, records seen, responses stored, in-op ingest seconds."""
        run_config = dict(QUIET_LOGGERS)
        if op_config:
            run_config["ops"] = {"raw_warc_ingest": {"config": op_config}}
        records = responses = rejects = 0
        ingest_seconds = 0.0
        t0 = time.perf_counter()
        for key in self.keys:
            res = self.job.execute_in_process(
                instance=self.instance, partition_key=key, run_config=run_config, raise_on_error=False
            )
            if not res.success:
                failure = res.failure_data_for_node("raw_warc_ingest")
                error = failure.error if failure is not None else None
                while error is not None and error.cause is not None:  # the op's own exception, not Dagster's wrapper
                    error = error.cause
                raise BenchFailure(
                    f"raw ingest of partition {key} failed (run {res.run_id}): "
                    f"{error.message.strip() if error is not None else 'no error recorded'}"
                )
            for mat in res.asset_materializations_for_node("raw_warc_ingest"):
                meta = mat.metadata
                if mat.asset_key.path == ["raw", "warc_records"]:
                    responses += meta["dagster/row_count"].value
                    ingest_seconds += meta["seconds"].value
                    records += _records_by_type(meta["records_by_type"].value)
                else:
                    rejects += meta["dagster/row_count"].value
        return {
            "seconds": time.perf_counter() - t0,
            "records": records,
            "responses": responses,
            "rejects": rejects,
            "ingest_seconds": ingest_seconds,
            "partitions": len(self.keys),
        }


def child_main(mode: str, crawl_root: Path, home: Path, batch_bytes: int | None) -> None:
    """One measurement in a fresh process; prints one JSON line (the parent reads the peak RSS itself)."""
    use_temp_home(home, crawl_root)
    if mode == "bare":
        out = bare_pass(warc_paths(crawl_root))
    elif mode == "idle":  # what the asset's process holds before reading any WARC byte
        AssetRunner()
        out = {}
    else:
        out = AssetRunner().run_all({"batch_bytes": batch_bytes} if batch_bytes else None)
    out["vm_hwm_kib"] = vm_hwm_kib()
    print(json.dumps(out))


def measure_child(mode: str, crawl_root: Path, work: Path, batch_bytes: int | None = None) -> dict:
    """Run one child; its result plus `peak_rss_mib`, the child's own VmHWM.

    Not rusage: Linux folds the parent's RSS at fork/vfork time into the child's ru_maxrss, so every child of
    this (Dagster-importing) process would report at least the parent's size."""
    home = Path(tempfile.mkdtemp(prefix=f"home-{mode}-", dir=work))
    cmd = child_command(__file__, mode, crawl=crawl_root, home=home, batch_bytes=batch_bytes or None)
    try:
        result, _, _ = run_json_child(cmd, repo_env(), f"child '{mode}' on {crawl_root}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result["peak_rss_mib"] = result["vm_hwm_kib"] / 1024
    return result


def check_counts(name: str, asset: dict, bare: dict, factor: int = 1) -> None:
    """The asset must see every record warcio sees and store every response."""
    if asset["responses"] != bare["responses"] * factor or asset["records"] != bare["records"] * factor:
        raise BenchFailure(
            f"{name}: the asset saw {asset['records']} records and stored {asset['responses']} responses "
            f"({asset['rejects']} rejects); warcio sees {bare['records'] * factor} records, "
            f"{bare['responses'] * factor} responses"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crawl", type=Path, default=SAMPLE_CRAWL, help="crawl root (Common Crawl layout)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (>= 1)")
    parser.add_argument("--copies", type=int, default=10, help="size factor of the large input")
    parser.add_argument("--small-batch-mib", type=float, default=4.0, help="0 skips the small-batch runs")
    parser.add_argument("--child", choices=["asset", "bare", "idle"], help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--batch-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    crawl = args.crawl.resolve()
    if args.child:
        child_main(args.child, crawl, args.home, args.batch_bytes)
        return 0

    return run_reported("ingest", lambda work: run_bench(crawl, work, args))


def run_bench(crawl: Path, work: Path, args) -> int:
    paths = warc_paths(crawl)
    mb = sum(p.stat().st_size for p in paths) / 1e6
    print(f"input: {crawl} - {len(paths)} WARC files, {mb:.2f} MB compressed")

    # 1. throughput, in this process
    use_temp_home(work / "home", crawl)
    runner = AssetRunner()
    print(f"partitions: {', '.join(runner.keys)}")
    bare_warm = bare_pass(paths)
    asset_warm = runner.run_all()  # first run also creates the tables and warms Dagster's storage
    check_counts("1x", asset_warm, bare_warm)
    records = bare_warm["records"]
    print(
        f"records: {records} ({bare_warm['responses']} responses, stored by the asset: {asset_warm['responses']}, "
        f"rejected: {asset_warm['rejects']})"
    )
    bare_s, asset_s, ingest_s = [], [], []
    for _ in range(args.repeats):
        bare_s.append(bare_pass(paths)["seconds"])
        run = runner.run_all()
        check_counts("1x", run, bare_warm)
        asset_s.append(run["seconds"])
        ingest_s.append(run["ingest_seconds"])
    b, a, i = (statistics.median(x) for x in (bare_s, asset_s, ingest_s))
    print(f"\n1. throughput on the sample crawl (median of {args.repeats}, after 1 warm-up)")
    print(f"  {'':<44}{'seconds':>9}{'records/s':>12}{'MB/s':>9}")
    rows = [
        ("bare warcio loop", b),
        (f"asset: {len(runner.keys)} materialisations (incl. commits)", a),
        ("  of which ingest tasks (read+parse+write)", i),
    ]
    for name, s in rows:
        print(f"  {name:<44}{s:>9.3f}{records / s:>12.0f}{mb / s:>9.2f}")
    print(
        f"  ratio asset/bare (records/s): {b / a:.3f}  (the asset takes {a / b:.1f}x the bare loop's time; "
        f"the ingest tasks alone {i / b:.1f}x)"
    )
    print(
        f"  outside the ingest tasks (Dagster run, plan, Iceberg commits): "
        f"{(a - i) / len(runner.keys):.3f} s per partition"
    )

    # 2. peak RSS, one fresh process each
    big = work / f"crawl-{args.copies}x"
    big_mb = make_copies(crawl, big, args.copies) / 1e6
    print(f"\n2. peak RSS, fresh subprocess each ({args.copies}x input: {big_mb:.1f} MB compressed)")
    idle = measure_child("idle", crawl, work)
    print(f"  baseline (imports + Dagster instance, nothing read): {idle['peak_rss_mib']:.0f} MiB")
    small = int(args.small_batch_mib * (1 << 20))
    configs = [("asset, default config", "asset", None)]
    if small:
        configs.append((f"asset, batch_bytes={args.small_batch_mib:g} MiB", "asset", small))
    configs.append(("bare warcio loop", "bare", None))
    ratios = {}
    print(f"  {'':<32}{'RSS 1x':>10}{f'RSS {args.copies}x':>11}{'ratio':>8}{f'records/s {args.copies}x':>16}")
    for name, mode, batch in configs:
        one = measure_child(mode, crawl, work, batch)
        ten = measure_child(mode, big, work, batch)
        if mode == "asset":
            check_counts(f"{args.copies}x ({name})", ten, bare_warm, args.copies)
        rate = ten["records"] / ten["seconds"]
        ratios[mode, batch] = ten["peak_rss_mib"] / one["peak_rss_mib"]
        print(
            f"  {name:<32}{one['peak_rss_mib']:>7.0f} MiB{ten['peak_rss_mib']:>7.0f} MiB"
            f"{ten['peak_rss_mib'] / one['peak_rss_mib']:>8.2f}{rate:>16.0f}"
        )
    from assets.raw.defs import RawIngestConfig

    default_batch = RawIngestConfig.model_fields["batch_bytes"].default
    seg_mib = bare_warm["max_segment_response_bytes"] / (1 << 20)
    print(
        f"  the default batch_bytes ({default_batch / (1 << 20):g} MiB) holds the largest segment's responses whole "
        f"at 1x ({seg_mib:.1f} MiB) but not at {args.copies}x ({seg_mib * args.copies:.0f} MiB): its growth "
        f"stops at the batch cap; with a batch smaller than one segment, peak RSS does not depend on input size"
    )
    if small and ratios["asset", small] > MAX_FLAT_RATIO:
        raise BenchFailure(
            f"peak RSS of the asset with batch_bytes={args.small_batch_mib:g} MiB grew "
            f"{ratios['asset', small]:.2f}x on {args.copies}x the input (allowed {MAX_FLAT_RATIO}x): "
            "memory is not bounded by the batch"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
