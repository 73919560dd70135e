"""Run-view candidate builds at scale: the candidate built as tasks (assets/run_view/selection.py) against the
one-process build it replaced (`store.build_in_one_process`), on a generated lakehouse, in the same run.

    python bench/run_view_scale.py [--samples 1e6,8e6] [--docs-per-segment 250000] [--workers 2] [--json]

Per size: a lakehouse of tokenized documents with every table a candidate reads (tests/run_view/generated.py:
rows written directly, ~8% not kept, 2% exact and 2% near duplicates, 0.5% contaminated) sized so that its
mixture (`generated.MIXTURE`: two partial passes, one component over four full passes, no budget) selects about
that many samples. Each build runs in a process of its own: the tasks on `bench.task_pool.FreshProcessExecutor`
(every task a fresh process, so its peak RSS is its own), the baseline in one process where it fits in memory
(`--baseline-max-samples`). Printed: build seconds, peak RSS of the step process and of the largest task, the
baseline over tasks ratios, and whether both builds gave the same samples digest and manifest (apart from the
view's name). `--json` prints exactly one JSON object on its own line.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from bench.children import child_command, repo_env, run_json_child  # noqa: E402

MIB = 1 << 20


def parse_sizes(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x.strip()]


def child_env(home: Path) -> dict:
    return {**repo_env(), "TOKENLAKE_HOME": str(home)}


def child_generate(args) -> dict:
    from iceberg_catalog import Lakehouse
    from tests.run_view import generated

    t0 = time.perf_counter()
    segments = max(1, math.ceil(args.docs / args.docs_per_segment))
    generated.write_lakehouse(Lakehouse(), args.docs, segments)
    return {"seconds": time.perf_counter() - t0, "segments": segments}


def child_build(args) -> dict:
    """One build in this process: the tasks on fresh processes, or the one-process baseline."""
    from assets.run_view import store
    from bench.task_pool import FreshProcessExecutor
    from iceberg_catalog import Lakehouse, Provenance
    from iceberg_catalog.run_view_contract import canonical_json
    from tests.run_view import generated

    lakehouse = Lakehouse()
    spec = store.RunViewSpec(name=args.child, tokenizer=generated.TOKENIZER, components=generated.MIXTURE)
    prov = Provenance("run_view/candidate", None, "bench", "bench", "bench")
    pinned = lakehouse.snapshot_ids(store.INPUT_TABLES)
    executor = FreshProcessExecutor(args.workers)
    t0 = time.perf_counter()
    if args.child == "tasks":
        result = store.build_candidate(lakehouse, spec, prov, pinned, executor=executor.map)
    else:
        result = store.build_in_one_process(lakehouse, spec, prov, pinned)
    seconds = time.perf_counter() - t0
    stages = [s.summary() for s in executor.stages]
    unnamed = {k: v for k, v in result.manifest.items() if k != "name"}
    return {
        "seconds": seconds,
        "step_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "max_task_peak_rss_bytes": max((s["max_task_peak_rss_bytes"] for s in stages), default=0),
        "stages": stages,
        "samples": result.manifest["samples"]["n_samples"],
        "documents": result.manifest["samples"]["n_documents"],
        "samples_sha256": result.manifest["samples"]["sha256"],
        "manifest_sans_name_sha256": hashlib.sha256(canonical_json(unnamed).encode()).hexdigest(),
    }


def measure(args, samples: int) -> dict:
    """Generate a lakehouse for about `samples` samples, build it both ways, compare."""
    docs = math.ceil(samples / 0.542)  # samples per generated document under generated.MIXTURE (measured)
    home = Path(tempfile.mkdtemp(prefix="rv-scale-")) / "tokenlake"
    try:
        gen, _, _ = run_json_child(
            child_command(__file__, "generate", docs=docs, docs_per_segment=args.docs_per_segment),
            child_env(home),
            f"generate ({docs:,} documents)",
        )
        tasks, _, _ = run_json_child(
            child_command(__file__, "tasks", workers=args.workers), child_env(home), "tasks build"
        )
        out = {"target_samples": samples, "documents_generated": docs, "segments": gen["segments"]}
        out.update(generate_seconds=round(gen["seconds"], 1), tasks=tasks)
        if samples <= args.baseline_max_samples:
            base, _, _ = run_json_child(child_command(__file__, "baseline"), child_env(home), "one-process build")
            out["baseline"] = base
            out["identical"] = (base["samples_sha256"], base["manifest_sans_name_sha256"]) == (
                tasks["samples_sha256"],
                tasks["manifest_sans_name_sha256"],
            )
            out["seconds_ratio_baseline_over_tasks"] = round(base["seconds"] / tasks["seconds"], 3)
            out["step_rss_ratio_baseline_over_tasks"] = round(
                base["step_peak_rss_bytes"] / tasks["step_peak_rss_bytes"], 3
            )
        return out
    finally:
        shutil.rmtree(home.parent, ignore_errors=True)


def report(results: list[dict]) -> None:
    for r in results:
        t = r["tasks"]
        print(
            f"{t['samples']:>11,} samples of {t['documents']:,} documents ({r['documents_generated']:,} generated, "
            f"{r['segments']} segments)"
        )
        print(
            f"  tasks:    {t['seconds']:8.1f} s   step process {t['step_peak_rss_bytes'] / MIB:7.0f} MiB   "
            f"largest task {t['max_task_peak_rss_bytes'] / MIB:6.0f} MiB"
        )
        for s in t["stages"]:
            print(
                f"    {s['name']:<14} {s['tasks']:>4} tasks {s['wall_s']:7.1f} s wall {s['cpu_s']:7.1f} s CPU   "
                f"largest {s['max_task_peak_rss_bytes'] / MIB:6.0f} MiB"
            )
        b = r.get("baseline")
        if b is None:
            print("  baseline: not run (above --baseline-max-samples)")
            continue
        print(f"  baseline: {b['seconds']:8.1f} s   one process  {b['step_peak_rss_bytes'] / MIB:7.0f} MiB")
        print(
            f"  ratio baseline/tasks: time {r['seconds_ratio_baseline_over_tasks']}x, step RSS "
            f"{r['step_rss_ratio_baseline_over_tasks']}x; same digest and manifest: {r['identical']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default="1e6", help="comma-separated sample counts (e.g. 1e6,8e6)")
    parser.add_argument("--docs-per-segment", type=int, default=250_000)
    parser.add_argument("--workers", type=int, default=2, help="tasks at once (each a fresh process)")
    parser.add_argument(
        "--baseline-max-samples",
        type=float,
        default=2e6,
        help="larger sizes skip the one-process baseline (~2 KB/document)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on its own line")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--docs", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = child_generate(args) if args.child == "generate" else child_build(args)
        print(json.dumps(result))
        return
    results = [measure(args, n) for n in parse_sizes(args.samples)]
    if args.json:
        print(json.dumps({"bench": "run_view_scale", "workers": args.workers, "sizes": results}))
    else:
        report(results)


if __name__ == "__main__":
    main()
