"""`make cluster-demo` end to end: PostgreSQL 15, SeaweedFS and a 2-node Ray cluster on loopback, the demo's
steps with tasks on Ray and WARCs from S3; the same samples digest as `make demo`, both nodes ran tasks, and
every process it started (PIDs from its own output) is gone afterwards."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.local_cluster.demo import missing_binaries
from tests.cluster.test_catalogs import SAMPLES_DIGEST_PREFIX
from tests.conftest import skip_here_fail_in_ci

pytestmark = pytest.mark.slow  # ~2.5 minutes on 2 cores

REPO = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_cluster_demo_runs_the_demo_on_servers_and_stops_what_it_started(tmp_path):
    missing = missing_binaries()
    skip_here_fail_in_ci(f"cluster demo prerequisites missing: {missing}" if missing else None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOKENLAKE_", "RAY_", "AWS_", "DAGSTER_"))}
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration.local_cluster.demo"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, (out[-3000:], proc.stderr[-3000:])
    assert re.search(rf"samples digest\s+{SAMPLES_DIGEST_PREFIX}", out), out[-3000:]
    per_node = dict(re.findall(r"^\s+(127\.0\.0\.\d+): (\d+) tasks", out, re.M))
    assert set(per_node) == {"127.0.0.2", "127.0.0.3"} and all(int(n) > 0 for n in per_node.values()), per_node
    assert "checks: checksums_verified passed" in out and "nothing left running" in out
    pids = [int(p) for p in re.search(r"stopping by PID: [^:]*: ([\d ]+)", out).group(1).split()]
    assert len(pids) == 5, out[-2000:]  # 2 ray nodes, weed server, weed volume, PostgreSQL
    assert not [p for p in pids if alive(p)], "processes the cluster demo started are still running"
