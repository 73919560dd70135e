"""Near dedup at crawl scale (issue 39 item 4): per size and step, documents, tasks, wall and CPU seconds,
documents/s per core, the largest peak RSS of any task and of the step process, bytes read, and
precision/recall against a planted truth; datatrove 0.10.1's MinHash stages side by side on the real texts.

1. synthetic, per --docs size: MinHash signatures and LSH bands with planted near-duplicate clusters
   (bench/dedup_scale_data.py: ~10% duplicates in clusters of 2-50, chains across 4 crawls, template clusters
   and boilerplate buckets of 10k), written straight into an embedded lakehouse (setup, not timed); then
   near dedup with verify="estimated".
2. real text, --real-docs documents: sentences of real pages (data/corpus, ../shared/data) with perturbed
   copies, written as kept curated.documents rows; then "signatures" (assets/dedup/signatures.py: plan,
   run_task on the executor, commit) and near dedup with verify="exact".
3. datatrove on the same real texts (JSONL, same order): MinhashDedupSignature, MinhashDedupBuckets,
   MinhashDedupCluster, MinhashDedupFilter with 5-grams, 14 buckets x 8 hashes, each stage its own process
   in datatrove's venv (bench/out/venvs/datatrove); --no-datatrove skips it.
4. incremental, per --incremental size N: the planted clusters of N + M documents (M = --new-crawl-docs), the
   first N written as the 4 crawls and near dedup run over them (setup, not timed); their rows of
   dedup.near_duplicates hashed (iceberg_catalog.digest.rows_digest) and their data files listed; then the
   last M written as one more crawl (new partitions of the band and signature tables: its duplicates point
   into the earlier crawls' clusters as well as within it) and the timed near run, which must recompute only
   that crawl (plan.first) and leave the earlier crawls' rows and data files as they were; its rows scored
   on the added crawl's documents. At the smallest N, a run recomputing every crawl on the same tables
   must write the added crawl's rows the incremental run wrote. Then the ratios of the largest N's
   incremental run to the smallest's (wall, CPU, bytes read).

Every step runs in a fresh child process (the step process: plan and commit; its peak RSS is VmHWM). Its
tasks run on `bench.task_pool.FreshProcessExecutor`: 2 at a time, each in a fresh spawned process, so a
task's ru_maxrss is its own. CPU seconds = the step process's + its tasks' (measured around the task
function, without each task process's start-up); documents/s per core = documents / those CPU seconds.
Bytes read = rchar (read/pread syscalls) of the step process and its tasks. "baseline" (at the size given
by --baseline-docs) is the same stages uncut: one partition, one band-hash range, every task in the step
process (the single-process shape; the old implementation is kept only as the tests' oracle, which the
stages equal on every test input), recomputing every crawl on the same tables: its digest must equal the
step's.

    python bench/dedup_scale.py [--docs 1e6,4e6,16e6] [--real-docs 1e6] [--incremental 1e6,8e6]
        [--new-crawl-docs 1e6] [--json] [--no-datatrove]

An empty --docs or --incremental, or --real-docs 0, skips that part. `--json` adds one line with the whole
report: {"synthetic", "real", "datatrove", "incremental": {"new_crawl_docs", "cases", "time_ratio",
"cpu_ratio", "bytes_ratio"}}. Exits 1 when a step fails, the baseline's rows differ, or an incremental run
recomputed another crawl, changed an earlier crawl's rows or files, or disagrees with the from-scratch run;
the rates and memory are printed, never judged.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import EqualTo, LessThan

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.children import child_command, run_json_child  # noqa: E402
from bench.common import BenchFailure, clean_env, run_reported, vm_hwm_kib  # noqa: E402
from bench.curate import DT_VENV, ensure_datatrove_venv  # noqa: E402
from bench.dedup import mib, ours_env  # noqa: E402
from bench.dedup_scale_data import Layout, score  # noqa: E402
from bench.task_pool import FreshProcessExecutor, cpu_seconds, read_bytes  # noqa: E402
from iceberg_catalog.schemas import DEDUP_NEAR_DUPLICATES  # noqa: E402

DT_STAGES_SCRIPT = ROOT / "bench" / "dedup_datatrove" / "minhash_stages.py"
DT_STAGES = ("signature", "buckets", "cluster", "filter")
CRAWLS, SEGMENTS = 4, 4
CHILD_OPTIONS = ("seed", "batch_docs", "workers", "big_size", "sentences")  # every child gets these
SCORED = ("doc_id", "decision", "duplicate_of")  # the columns precision/recall read


class StepClock:
    """Wall, CPU and bytes read of the step process's own phases (plan, commit, ...)."""

    def __init__(self) -> None:
        self.phases: list[dict] = []

    def run(self, name: str, fn, *args):
        cpu0, read0, t0 = cpu_seconds(), read_bytes(), time.perf_counter()
        out = fn(*args)
        self.phases.append(
            {
                "name": name,
                "wall_s": time.perf_counter() - t0,
                "cpu_s": cpu_seconds() - cpu0,
                "bytes_read": read_bytes() - read0,
            }
        )
        return out


def step_record(step: str, documents: int, clock: StepClock, executor: FreshProcessExecutor | None) -> dict:
    """One step's figures: the step process's phases plus the tasks of every executor stage."""
    stages = [s.summary() for s in executor.stages] if executor else []
    cpu = sum(p["cpu_s"] for p in clock.phases) + sum(s["cpu_s"] for s in stages)
    return {
        "step": step,
        "documents": documents,
        "tasks": sum(s["tasks"] for s in stages),
        "wall_s": sum(p["wall_s"] for p in clock.phases),
        "cpu_s": cpu,
        "docs_per_s_per_core": documents / cpu if cpu > 0 else None,
        "max_task_peak_rss_bytes": max((s["max_task_peak_rss_bytes"] for s in stages), default=None),
        "step_peak_rss_bytes": vm_hwm_kib() * 1024,
        "bytes_read": sum(p["bytes_read"] for p in clock.phases) + sum(s["bytes_read"] for s in stages),
        "phases": clock.phases,
        "stages": stages,
    }


# ---- children: each a fresh process under the size's TOKENLAKE_HOME -----------------------------------------


def layout_of(args) -> Layout:
    """The size's documents over CRAWLS crawls, plus the added crawl of `args.added` documents (incremental)."""
    return Layout(args.n, CRAWLS, SEGMENTS, args.seed, args.added)


def synthetic_truth(args):
    """The planted clusters over every document, the added crawl's included (so its duplicates point into the
    earlier crawls as well as within itself, as any cluster's members spread over the crawls)."""
    from bench.dedup_scale_data import plant

    return plant(args.n + args.added, args.seed, big_size=args.big_size)


def child_synth_write(args) -> dict:
    """The CRAWLS crawls' signatures and bands (not the added crawl's)."""
    from bench.dedup_scale_data import write_synthetic
    from iceberg_catalog import Lakehouse

    planted = synthetic_truth(args)
    np.save(args.home / "roots.npy", planted.roots())
    rows = write_synthetic(Lakehouse(), layout_of(args), planted, args.batch_docs, range(CRAWLS))
    return {"band_rows": rows, "buckets": int((planted.bucket[: args.n] >= 0).sum())}


def child_synth_add(args) -> dict:
    """The earlier crawls' near-duplicate rows and data files, then the added crawl's signatures and bands as
    new partitions (the earlier ones untouched)."""
    from bench.dedup_scale_data import added_links, write_synthetic
    from iceberg_catalog import Lakehouse

    lakehouse, layout, planted = Lakehouse(), layout_of(args), synthetic_truth(args)
    earlier = near_rows_state(lakehouse, LessThan("crawl", layout.crawl_name(CRAWLS)))
    rows = write_synthetic(lakehouse, layout, planted, args.batch_docs, [CRAWLS])
    return {"band_rows": rows, "planted": added_links(planted, args.n), "earlier": earlier}


def child_real_write(args) -> dict:
    from bench.dedup_scale_data import plant, real_sentences, real_texts, write_real
    from iceberg_catalog import Lakehouse

    sentences, notes = real_sentences()
    planted = plant(args.n, args.seed, big_clusters=0, big_buckets=0)
    np.save(args.home / "roots.npy", planted.roots())
    texts = real_texts(planted, sentences, args.seed, args.sentences)
    layout = layout_of(args)
    rows = write_real(Lakehouse(), layout, texts, args.batch_docs)
    (args.home / "jsonl").mkdir()
    parts = np.array_split(np.arange(args.n), args.workers)  # datatrove's input files: one per task
    ids = [d for _, _, s0, s1 in layout.partitions() for d in layout.doc_ids(s0, s1)]
    for k, part in enumerate(parts):
        with open(args.home / "jsonl" / f"docs-{k:02d}.jsonl", "w", encoding="utf-8") as fh:
            for i in part.tolist():
                fh.write(json.dumps({"id": ids[i], "text": texts[i]}) + "\n")
    return {"rows": rows, "notes": notes, "words": sum(t.count(" ") + 1 for t in texts)}


def child_signatures(args) -> dict:
    """The pipeline's own MinHash step over every partition: all tasks on one executor, one commit each."""
    from assets.dedup import signatures
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES

    lakehouse, clock, executor = Lakehouse(), StepClock(), FreshProcessExecutor(args.workers)
    params = signatures.SignatureParams()
    snap = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    parts = [(c, s) for c, s, _, _ in layout_of(args).partitions()]
    plans = clock.run(
        "plan", lambda: [signatures.plan(lakehouse, c, s, snap, params, f"sig-{c}-{s}") for c, s in parts]
    )
    flat = [t for tasks in plans for t in tasks]
    results = clock.run("execute", executor.map, signatures.run_task, flat)
    prov = {t: bench_prov(t.identifier, args.seed) for t in (DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES)}

    def commit_all() -> None:
        k = 0
        for (crawl, segment), tasks in zip(parts, plans):
            signatures.commit(lakehouse, crawl, segment, results[k : k + len(tasks)], prov)
            k += len(tasks)

    clock.run("commit", commit_all)
    return step_record("signatures", signatures.totals(results)["documents"], clock, executor)


def bench_prov(what: str, seed: int):
    from bench.dedup_scale_data import bench_provenance

    return bench_provenance(what, "", seed)


def every_crawl(plan):
    """`plan` recomputing every crawl, as a first run does (the stored rows are ignored)."""
    return dataclasses.replace(plan, first=min(plan.fingerprints))


def near_staged(lakehouse, params, run: str, executor, clock: StepClock, from_scratch: bool = False):
    """Near dedup as the asset runs it: plan -> execute(plan, executor) (every stage's tasks on `executor`) ->
    commit; every crawl recomputed when `from_scratch`. Returns the stats, with the first recomputed crawl and
    each stage's cost."""
    from assets.dedup import near

    plan = clock.run("plan", near.plan, lakehouse, params, run)
    plan = every_crawl(plan) if from_scratch else plan
    result = clock.run("execute", near.execute, plan, executor)
    clock.run("commit", near.commit, lakehouse, plan, result, bench_prov("dedup/near_duplicates", 0))
    return {**result.stats, "first": plan.first, "stages": [dataclasses.asdict(s) for s in result.stages]}


def near_single_process(lakehouse, params, run: str, clock: StepClock):
    """The baseline: the same stages, one partition and one band-hash range each, every task in this process
    (what the pipeline did before the stages were cut: one process holding every document's pairs)."""
    from assets.dedup import near
    from resources.executor import InProcessExecutor

    one = dataclasses.replace(params, partitions=1, docs_per_task=1 << 62)
    plan = every_crawl(clock.run("plan", near.plan, lakehouse, one, run))
    result = clock.run("run", near.execute, plan, InProcessExecutor())
    clock.run("commit", near.commit, lakehouse, plan, result, bench_prov("dedup/near_duplicates", 0))
    return {**result.stats, "first": plan.first}


def near_step(args, lakehouse) -> dict:
    """Near dedup on the size's tables as `args.impl` says: "staged" (the asset's stages, tasks on fresh
    processes), "scratch" (the same, every crawl recomputed) or "baseline" (uncut, in this process); its record
    with the counts, the first recomputed crawl and the table's digest."""
    from assets.dedup.near_plan import NearDuplicateParams
    from iceberg_catalog.digest import table_digest

    clock, params = StepClock(), NearDuplicateParams(verify=args.verify)
    if args.impl == "baseline":
        executor, stats = None, near_single_process(lakehouse, params, "near-baseline", clock)
    else:
        executor = FreshProcessExecutor(args.workers)
        run = "near" if args.impl == "staged" else "near-scratch"
        stats = near_staged(lakehouse, params, run, executor, clock, args.impl == "scratch")
    suffix = {"staged": "", "scratch": " (from scratch)", "baseline": " (baseline)"}[args.impl]
    if args.impl == "staged" and stats["first"] not in (None, layout_of(args).crawl_name(0)):
        suffix = " (incremental)"
    out = step_record(f"near {args.verify}{suffix}", stats["documents"], clock, executor)
    out["counts"] = {k: stats[k] for k in ("candidate_pairs", "verified_pairs", "clusters", "near_duplicates")}
    out["stages"] = stats.get("stages", [])
    out["first"] = stats["first"]
    out["digest"] = table_digest(lakehouse, DEDUP_NEAR_DUPLICATES)["sha256"]
    return out


def near_rows_state(lakehouse, where) -> dict:
    """The rows of dedup.near_duplicates matching `where`: how many, their sha256 (rows sorted: independent of
    order and chunking) and the data files that hold them."""
    from iceberg_catalog.digest import rows_digest

    snapshot = lakehouse.snapshot_id(DEDUP_NEAR_DUPLICATES)
    rows = lakehouse.scan_at(DEDUP_NEAR_DUPLICATES, snapshot, row_filter=where)
    files = sorted(f.file.file_path for s in lakehouse.slices(DEDUP_NEAR_DUPLICATES, snapshot, where) for f in s.files)
    return {"rows": rows.num_rows, "sha256": rows_digest(rows), "files": files}


def child_near(args) -> dict:
    """Near dedup over the size's CRAWLS crawls, scored on their documents."""
    from iceberg_catalog import Lakehouse

    lakehouse = Lakehouse()
    out = near_step(args, lakehouse)
    rows = lakehouse.scan(DEDUP_NEAR_DUPLICATES, SCORED)
    out["quality"] = score(np.load(args.home / "roots.npy"), rows, range(args.n))
    return out


def child_near_added(args) -> dict:
    """Near dedup after the added crawl came (incremental, or from scratch): the earlier crawls' rows and files,
    the added crawl's rows, scored on its documents."""
    from iceberg_catalog import Lakehouse

    lakehouse, new = Lakehouse(), layout_of(args).crawl_name(CRAWLS)
    out = near_step(args, lakehouse)
    out["earlier"] = near_rows_state(lakehouse, LessThan("crawl", new))
    out["added"] = near_rows_state(lakehouse, EqualTo("crawl", new))
    rows = lakehouse.scan(DEDUP_NEAR_DUPLICATES, SCORED, EqualTo("crawl", new))
    out["quality"] = score(np.load(args.home / "roots.npy"), rows, range(args.n, args.n + args.added))
    return out


CHILDREN = {
    "synth-write": child_synth_write,
    "real-write": child_real_write,
    "signatures": child_signatures,
    "near": child_near,
    "synth-add": child_synth_add,
    "near-added": child_near_added,
}


# ---- the parent ---------------------------------------------------------------------------------------------


def run_child(args, child: str, home: Path, n: int, **options) -> tuple[dict, float, float]:
    shared = {name: getattr(args, name) for name in CHILD_OPTIONS}
    cmd = child_command(__file__, child, home=home, n=n, **shared, **options)
    return run_json_child(cmd, ours_env(home), f"{child} child ({n:,} documents)")


def datatrove_stages(args, jsonl: Path, work: Path, roots: np.ndarray) -> list[dict]:
    """datatrove's four MinHash stages on the same texts, in its venv; a stage's tasks are --workers processes
    at once (cluster: one), each its own process. Per stage: wall of the whole stage, CPU and bytes read
    summed over its processes, the largest peak RSS; the last stage carries precision/recall."""
    venv = ensure_datatrove_venv(args.venv.resolve())
    out = []
    for stage in DT_STAGES:
        tasks = 1 if stage == "cluster" else args.workers
        cmds = [
            [venv["python"], str(DT_STAGES_SCRIPT), "--stage", stage, "--input", str(jsonl), "--work", str(work)]
            + ["--rank", str(r), "--tasks", str(tasks)]
            for r in range(tasks)
        ]
        t0 = time.perf_counter()
        names = [f"datatrove {stage} task {r}" for r in range(tasks)]
        with ThreadPoolExecutor(tasks) as pool:
            ranks = [res for res, _, _ in pool.map(run_json_child, cmds, [clean_env()] * tasks, names)]
        out.append(
            {
                "stage": stage,
                "tasks": tasks,
                "wall_s": time.perf_counter() - t0,
                "cpu_s": sum(r["cpu_s"] for r in ranks),
                "process_cpu_s": sum(r["process_cpu_s"] for r in ranks),
                "peak_rss_bytes": max(r["peak_rss_bytes"] for r in ranks),
                "bytes_read": sum(r["bytes_read"] for r in ranks),
                "versions": venv["versions"],
                "config": ranks[0]["config"],
            }
        )
    removed = pa.array([d for p in sorted(work.glob("removed_ids-*.txt")) for d in p.read_text().split()], pa.string())
    # datatrove does not say which document a removed one duplicates: precision/recall only
    rows = pa.table({"doc_id": removed, "decision": pa.repeat("near_duplicate", len(removed)), "duplicate_of": removed})
    out[-1]["quality"] = {**score(roots, rows), "right_canonical": None}
    return out


def incremental_case(args, home: Path, n: int, from_scratch: bool) -> dict:
    """A corpus of `n` synthetic documents, near dedup over it (setup), then the added crawl and the timed
    incremental run; with `from_scratch`, a run recomputing every crawl on the same tables after it."""
    m = args.new_crawl_docs
    written, wall, _ = run_child(args, "synth-write", home, n, added=m)
    setup = run_child(args, "near", home, n, added=m, verify="estimated", impl="staged")[0]
    added, add_wall, _ = run_child(args, "synth-add", home, n, added=m)
    steps = [setup, run_child(args, "near-added", home, n, added=m, verify="estimated", impl="staged")[0]]
    if from_scratch:
        steps.append(run_child(args, "near-added", home, n, added=m, verify="estimated", impl="scratch")[0])
    return {
        "documents": n,
        "new_crawl": Layout(n, CRAWLS, SEGMENTS, args.seed, m).crawl_name(CRAWLS),
        "new_crawl_docs": m,
        "setup_wall_s": wall + add_wall,
        "band_rows": written["band_rows"],
        "new_crawl_band_rows": added["band_rows"],
        "planted": added["planted"],
        "earlier_before": added["earlier"],
        "disk_bytes": disk_bytes(home),
        "steps": steps,
    }


def run_incremental(args, work: Path) -> dict | None:
    """The incremental case at every --incremental size (the smallest also from scratch) and the ratios of the
    largest size's incremental run to the smallest's."""
    if not args.incremental:
        return None
    cases = []
    for n in sorted(args.incremental):
        home = work / f"incremental-{n}"
        home.mkdir()
        cases.append(incremental_case(args, home, n, from_scratch=not cases))
        shutil.rmtree(home)
        print_incremental(cases[-1])
    small, large = cases[0]["steps"][1], cases[-1]["steps"][1]
    out = {
        "new_crawl_docs": args.new_crawl_docs,
        "cases": cases,
        "time_ratio": large["wall_s"] / small["wall_s"],
        "cpu_ratio": large["cpu_s"] / small["cpu_s"],
        "bytes_ratio": large["bytes_read"] / small["bytes_read"],
    }
    print(
        f"\nincremental {cases[-1]['documents']:,} / {cases[0]['documents']:,}: time {out['time_ratio']:.2f}x, "
        f"CPU {out['cpu_ratio']:.2f}x, bytes read {out['bytes_ratio']:.2f}x"
    )
    return out


def run_bench(args, work: Path) -> dict:
    report: dict = {"synthetic": [], "real": None, "datatrove": None}
    for n in args.docs:
        home = work / f"synthetic-{n}"
        home.mkdir()
        written, wall, _ = run_child(args, "synth-write", home, n)
        entry = {"documents": n, "setup_wall_s": wall, **written, "disk_bytes": disk_bytes(home)}
        print(
            f"synthetic {n:,} documents: {written['band_rows']:,} band rows, {mib(entry['disk_bytes'])} on disk, "
            f"written in {wall:.0f} s (setup)",
            flush=True,
        )
        entry["steps"] = [run_child(args, "near", home, n, verify="estimated", impl="staged")[0]]
        if n == args.baseline_docs:
            entry["steps"].append(run_child(args, "near", home, n, verify="estimated", impl="baseline")[0])
        print_steps(entry["steps"])
        report["synthetic"].append(entry)
        shutil.rmtree(home)
    if args.real_docs:
        n, home = args.real_docs, work / "real"
        home.mkdir()
        written, wall, _ = run_child(args, "real-write", home, n)
        print(f"\nreal text {n:,} documents ({written['words']:,} words), written in {wall:.0f} s (setup):")
        for note in written["notes"]:
            print(f"  {note}")
        steps = [run_child(args, "signatures", home, n)[0]]
        steps.append(run_child(args, "near", home, n, verify="exact", impl="staged")[0])
        if n == args.baseline_docs:
            steps.append(run_child(args, "near", home, n, verify="exact", impl="baseline")[0])
        print_steps(steps)
        report["real"] = {"documents": n, "setup_wall_s": wall, "steps": steps, "notes": written["notes"]}
        if not args.no_datatrove:
            dt = datatrove_stages(args, home / "jsonl", work / "datatrove", np.load(home / "roots.npy"))
            print_datatrove(dt, n, steps)
            report["datatrove"] = dt
        shutil.rmtree(home)
    report["incremental"] = run_incremental(args, work)
    return report


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def fmt_rss(b: int | None) -> str:
    return "-" if b is None else mib(b)


def print_steps(steps: list[dict]) -> None:
    print(
        f"  {'step':<26}{'docs':>11}{'tasks':>6}{'wall s':>8}{'CPU s':>8}{'docs/s/core':>12}{'task peak':>11}"
        f"{'step peak':>11}{'read':>11}{'precision':>10}{'recall':>8}"
    )
    for s in steps:
        q = s.get("quality") or {}
        rate = s["docs_per_s_per_core"]
        print(
            f"  {s['step']:<26}{s['documents']:>11,}{s['tasks'] or '-':>6}{s['wall_s']:>8.1f}{s['cpu_s']:>8.1f}"
            f"{rate or 0:>12,.0f}{fmt_rss(s['max_task_peak_rss_bytes']):>11}{fmt_rss(s['step_peak_rss_bytes']):>11}"
            f"{mib(s['bytes_read']):>11}{q.get('precision', float('nan')):>10.4f}{q.get('recall', float('nan')):>8.4f}"
        )
    near = [s for s in steps if s["step"].startswith("near")]
    if len(near) == 2 and near[1]["step"].endswith("(baseline)"):
        same = near[0]["digest"] == near[1]["digest"]
        print(
            f"  near_duplicates digest: {near[0]['digest'][:12]} vs baseline {near[1]['digest'][:12]}: "
            + ("identical" if same else "DIFFERENT")
        )


def print_datatrove(dt: list[dict], n: int, ours: list[dict]) -> None:
    print(f"\n  datatrove ({dt[0]['versions']}), same {n:,} texts, every task its own process:")
    print(f"  {'stage':<20}{'tasks':>6}{'wall s':>8}{'CPU s':>8}{'docs/s/core':>12}{'peak RSS':>11}{'read':>11}")
    for s in dt:
        print(
            f"  {s['stage']:<20}{s['tasks']:>6}{s['wall_s']:>8.1f}{s['cpu_s']:>8.1f}{n / max(s['cpu_s'], 1e-9):>12,.0f}"
            f"{mib(s['peak_rss_bytes']):>11}{mib(s['bytes_read']):>11}"
        )
    q = dt[-1]["quality"]
    total = sum(s["cpu_s"] for s in dt)
    ours_total = sum(s["cpu_s"] for s in ours if "baseline" not in s["step"])
    ours_wall = sum(s["wall_s"] for s in ours if "baseline" not in s["step"])
    print(
        f"  datatrove end to end {sum(s['wall_s'] for s in dt):.1f} s wall, {total:.1f} CPU s; ours (signatures + "
        f"near exact) {ours_wall:.1f} s wall, {ours_total:.1f} CPU s; "
        f"datatrove removed {q['found_duplicates']:,}: precision {q['precision']:.4f}, recall {q['recall']:.4f}"
    )


def print_incremental(case: dict) -> None:
    """The case's steps, then one line: the incremental run's cost, what it recomputed, the earlier crawls'
    rows and files before/after, and the from-scratch comparison."""
    inc, planted, before = case["steps"][1], case["planted"], case["earlier_before"]
    print(
        f"\nincremental: {case['documents']:,} documents + crawl {case['new_crawl']} of {case['new_crawl_docs']:,} "
        f"({planted['duplicates']:,} planted duplicates: {planted['parent_earlier']:,} of an earlier crawl's "
        f"document, {planted['parent_same_crawl']:,} within; {planted['bucket_members']:,} boilerplate-bucket "
        f"members), {mib(case['disk_bytes'])} on disk, set up in {case['setup_wall_s']:.0f} s"
    )
    print_steps(case["steps"])
    same = "identical" if earlier_unchanged(case) else "CHANGED"
    line = (
        f"  {case['documents']:,} + {case['new_crawl_docs']:,}: incremental {inc['wall_s']:.1f} s wall, "
        f"{inc['cpu_s']:.1f} CPU s, {mib(inc['bytes_read'])} read, task peak {fmt_rss(inc['max_task_peak_rss_bytes'])}"
        f", step peak {fmt_rss(inc['step_peak_rss_bytes'])}; first recomputed {inc['first']}; earlier crawls' "
        f"{before['rows']:,} rows ({before['sha256'][:12]}) and {len(before['files'])} data files {same}"
    )
    if len(case["steps"]) > 2:
        line += "; new crawl's rows from scratch " + ("identical" if scratch_agrees(case) else "DIFFERENT")
    print(line, flush=True)


def earlier_unchanged(case: dict) -> bool:
    before, after = case["earlier_before"], case["steps"][1]["earlier"]
    return before["sha256"] == after["sha256"] and before["files"] == after["files"]


def scratch_agrees(case: dict) -> bool:
    """The from-scratch run wrote the added crawl's rows the incremental run wrote."""
    return case["steps"][2]["added"]["sha256"] == case["steps"][1]["added"]["sha256"]


def check(report: dict) -> None:
    groups = [e["steps"] for e in report["synthetic"]] + ([report["real"]["steps"]] if report["real"] else [])
    for steps in groups:
        near = [s for s in steps if s["step"].startswith("near")]
        if len(near) == 2 and near[0]["digest"] != near[1]["digest"]:
            raise BenchFailure(f"{near[0]['step']} and its baseline wrote different dedup.near_duplicates rows")
    for case in (report["incremental"] or {}).get("cases", []):
        at = f"incremental case at {case['documents']:,} documents"
        if case["steps"][1]["first"] != case["new_crawl"]:
            raise BenchFailure(f"{at}: recomputed from {case['steps'][1]['first']}, not the added crawl")
        if not earlier_unchanged(case):
            raise BenchFailure(f"{at}: the earlier crawls' dedup.near_duplicates rows or data files changed")
        if len(case["steps"]) > 2 and not scratch_agrees(case):
            raise BenchFailure(f"{at}: the added crawl's rows differ from a from-scratch run's")


def sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=sizes, default=sizes("1e6,4e6,16e6"), help="synthetic sizes (comma-separated)")
    parser.add_argument(
        "--real-docs", type=lambda t: int(float(t)), default=1_000_000, help="real-text documents (0: skip)"
    )
    parser.add_argument(
        "--baseline-docs", type=lambda t: int(float(t)), default=1_000_000, help="size that also runs the baseline"
    )
    parser.add_argument(
        "--incremental",
        type=sizes,
        default=sizes("1e6,8e6"),
        help="corpus sizes to add a crawl to, timing the incremental run (comma-separated; empty: skip)",
    )
    parser.add_argument(
        "--new-crawl-docs", type=lambda t: int(float(t)), default=1_000_000, help="documents of the added crawl"
    )
    parser.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    parser.add_argument("--no-datatrove", action="store_true", help="skip datatrove's stages")
    parser.add_argument("--venv", type=Path, default=DT_VENV, help="datatrove's venv (created if missing)")
    parser.add_argument("--workers", type=int, default=2, help="task processes at a time")
    parser.add_argument(
        "--batch-docs", type=int, default=2000, help="documents per written batch (signatures' default)"
    )
    parser.add_argument(
        "--big-size", type=int, default=10_000, help="members of each template cluster / boilerplate bucket"
    )
    parser.add_argument("--sentences", type=int, default=20, help="sentences per real document")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--verify", help=argparse.SUPPRESS)
    parser.add_argument("--impl", choices=["staged", "scratch", "baseline"], help=argparse.SUPPRESS)
    parser.add_argument("--added", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return 0

    def run(work: Path) -> int:
        report = run_bench(args, work)
        if args.json:
            print(json.dumps(report))
        check(report)
        return 0

    return run_reported("dedup-scale", run)


if __name__ == "__main__":
    raise SystemExit(main())
