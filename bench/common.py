"""What several benches share: the failure type, the sample crawl's WARC files, peak memory, the run wrapper."""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

WARC_GLOB = "crawl-data/*/segments/*/warc/*.warc.gz"


class BenchFailure(Exception):
    """Something the bench measures did not work; the message says what."""


def warc_paths(root: Path) -> list[Path]:
    """Every `.warc.gz` under a Common-Crawl-layout root, sorted."""
    paths = sorted(root.glob(WARC_GLOB))
    if not paths:
        raise BenchFailure(f"no {WARC_GLOB} under {root}")
    return paths


def vm_hwm_kib() -> int:
    """This process's peak resident set (VmHWM from /proc/self/status), KiB; 0 where unavailable."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_reported(name: str, run: Callable[[Path], int], missing_input_exit: int | None = None) -> int:
    """Run `run(workdir)` in a fresh temp dir and return its exit code: a BenchFailure prints FAILED and exits 1,
    a missing input file exits `missing_input_exit` when given; the elapsed time is printed either way."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"tokenlake-bench-{name}-", ignore_cleanup_errors=True) as tmp:
        try:
            return run(Path(tmp))
        except FileNotFoundError as exc:
            if missing_input_exit is None:
                raise
            print(f"\nMISSING INPUT: {exc}", file=sys.stderr)
            return missing_input_exit
        except BenchFailure as exc:
            print(f"\nFAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            print(f"\n(bench took {time.perf_counter() - started:.0f} s)")
