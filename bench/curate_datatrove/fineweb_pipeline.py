"""The FineWeb per-dump recipe of datatrove (examples/fineweb.py, minus URLFilter and exclusion writers), run
offline on a folder of WARC files. Runs inside datatrove's own venv (bench/curate.py creates it); never
imports tokenlake.

    python fineweb_pipeline.py --crawl DIR --work DIR --lid-model lid.176.ftz

Prints one JSON line: datatrove's stats.json (documents in/out and drop reasons per block) and this process's
CPU and wall seconds for the pipeline alone (imports and start-up excluded; the caller measures the whole
process tree).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path


def cpu_seconds() -> float:
    """User+system CPU of this process and every child it has reaped (the extractor sandbox). bench/curate.py
    imports these process-accounting helpers from here: this script cannot import bench (datatrove's venv)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        ru = resource.getrusage(who)
        total += ru.ru_utime + ru.ru_stime
    return total


def become_subreaper() -> None:
    """Orphaned grandchildren get re-parented to this process (not init), so `reap_all` can count them."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def reap_all(timeout_s: float = 10.0) -> int:
    """Wait for every remaining descendant (their CPU then counts); returns how many were still running."""
    gc.collect()  # weakref finalizers of worker handles close their processes
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return 0
        if pid == 0:
            if time.monotonic() > deadline:  # something still runs: reported, not hidden
                return sum(len(Path(t, "children").read_text().split()) for t in Path("/proc/self/task").iterdir())
            time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--crawl", type=Path, required=True, help="folder searched for **/*.warc.gz")
    parser.add_argument("--work", type=Path, required=True, help="empty folder for output and logs")
    parser.add_argument("--lid-model", type=Path, required=True, help="local fastText lid.176 model (.bin/.ftz)")
    parser.add_argument("--language", default="en")
    args = parser.parse_args()
    become_subreaper()

    # No downloads at run time: the hub stays offline and its asset cache lives in the work dir, so the
    # language-ID "download" below is a local file copy of --lid-model, never a fetch.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["HF_HOME"] = str(args.work / "hf_home")

    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.extractors import Trafilatura
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
        LanguageFilter,
    )
    from datatrove.pipeline.readers import WarcReader
    from datatrove.pipeline.writers.jsonl import JsonlWriter
    from datatrove.utils.lid import FT176LID

    # datatrove fetches https://dl.fbaipublicfiles.com/.../lid.176.bin through fsspec on first use; an
    # absolute local path goes through the same code path as a copy instead.
    FT176LID.MODEL_URL = str(args.lid_model.resolve())

    logs = args.work / "logs"
    executor = LocalPipelineExecutor(
        pipeline=[
            WarcReader(str(args.crawl), glob_pattern="**/*.warc.gz"),
            Trafilatura(favour_precision=True),
            # FineWeb is English-only; 0.10's default (languages=None) would keep any language over 0.65
            LanguageFilter(languages=[args.language]),
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            C4QualityFilter(filter_no_terminal_punct=False),
            FineWebQualityFilter(),
            JsonlWriter(str(args.work / "output")),
        ],
        tasks=1,
        workers=1,
        logging_dir=str(logs),
    )
    cpu0, wall0 = cpu_seconds(), time.perf_counter()
    executor.run()
    lingering = reap_all()
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0

    stats = json.loads((logs / "stats.json").read_text())
    print(
        json.dumps(
            {"pipeline_cpu_s": cpu, "pipeline_wall_s": wall, "lingering_children": lingering, "raw_stats": stats}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
