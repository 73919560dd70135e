"""What several benches share: the failure type, the sample crawl's WARC files, peak memory."""

from __future__ import annotations

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
