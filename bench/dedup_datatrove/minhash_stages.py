"""One of datatrove's four MinHash dedup stages over a folder of JSONL documents ({"id", "text"}), as FineWeb
runs them: 5-grams, 14 buckets x 8 hashes (datatrove's defaults: 64-bit xxhash, seed 1). Runs inside
datatrove's own venv (bench/dedup_scale.py calls it once per stage, so each stage's peak RSS is its own
process's VmHWM); never imports tokenlake.

    python minhash_stages.py --stage signature|buckets|cluster|filter --input DIR --work DIR [--rank R --tasks N]

Stages read and write under --work: signatures/, buckets/, remove_ids/; `filter` also writes
removed_ids-<rank>.txt (the ids of the documents it drops, one a line). As datatrove runs them, `signature`
and `filter` are N tasks over the input files (rank R reads files R, R+N, ...), `buckets` is 14 tasks (one
per bucket: this process runs buckets R, R+N, ... one after another, so its peak RSS is the largest one's or
more) and `cluster` is one task (--rank 0 --tasks 1). Prints one JSON line: the stage's
wall and CPU seconds after datatrove's imports (the whole process's CPU apart), VmHWM and rchar of this
process, and its counts.
"""

from __future__ import annotations

import argparse
import inspect
import json
import resource
import time
from pathlib import Path


def proc_value(path: str, key: str) -> int:
    for line in Path(path).read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return 0


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def drain(result) -> None:
    if inspect.isgenerator(result):
        for _ in result:
            pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stage", required=True, choices=["signature", "buckets", "cluster", "filter"])
    parser.add_argument("--input", type=Path, required=True)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=1)
    args = parser.parse_args()

    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader

    config = MinhashConfig(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=1)
    sigs, buckets, remove = (str(args.work / d) for d in ("signatures", "buckets", "remove_ids"))
    rank, tasks = args.rank, args.tasks
    out: dict = {"stage": args.stage, "rank": rank, "config": str(config)}
    cpu0, t0 = cpu_seconds(), time.perf_counter()  # after the imports: ours are measured without start-up too

    def documents():
        return JsonlReader(str(args.input), glob_pattern="*.jsonl").run(None, rank=rank, world_size=tasks)

    if args.stage == "signature":
        drain(MinhashDedupSignature(output_folder=sigs, config=config).run(documents(), rank=rank, world_size=tasks))
    elif args.stage == "buckets":
        step = MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=config)
        for bucket in range(rank, config.num_buckets, tasks):
            drain(step.run(None, rank=bucket, world_size=config.num_buckets))
    elif args.stage == "cluster":
        drain(MinhashDedupCluster(input_folder=buckets, output_folder=remove, config=config).run(None, 0, 1))
    else:
        seen: list[str] = []

        def recorded():
            for doc in documents():
                seen.append(doc.id)
                yield doc

        dropping = MinhashDedupFilter(input_folder=remove).run(recorded(), rank=rank, world_size=tasks)
        kept = {doc.id for doc in dropping}
        removed = [d for d in seen if d not in kept]
        (args.work / f"removed_ids-{rank}.txt").write_text("".join(f"{d}\n" for d in removed))
        out.update(kept=len(kept), removed=len(removed))
    out.update(
        wall_s=time.perf_counter() - t0,
        cpu_s=cpu_seconds() - cpu0,
        process_cpu_s=cpu_seconds(),
        peak_rss_bytes=proc_value("/proc/self/status", "VmHWM:") * 1024,
        bytes_read=proc_value("/proc/self/io", "rchar:"),
    )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
