"""Benches measure each step in a process of its own: the command that runs a bench script again as one of its
`--child` steps, the environment that puts this checkout on the path, and the run that returns the child's JSON
result with its wall and CPU seconds."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import BenchFailure

ROOT = Path(__file__).resolve().parents[1]  # the repository


def repo_env() -> dict:
    """The environment for a child that runs our code: this checkout first on PYTHONPATH."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def child_command(script: str, child: str, **options: object) -> list[str]:
    """The command that runs bench `script` again as its `--child` step, with `--name value` for each option
    (underscores in the name become dashes; a None value is left out): each measured step is its own process."""
    cmd = [sys.executable, str(Path(script).resolve()), "--child", child]
    for name, value in options.items():
        if value is not None:
            cmd += [f"--{name.replace('_', '-')}", str(value)]
    return cmd


def _children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_json_child(cmd: Sequence[str], env: dict | None, name: str) -> tuple[dict, float, float]:
    """Run one measured child: (the last JSON line it printed, wall seconds, CPU seconds of the child and of the
    descendants it reaped). A BenchFailure with the ends of its output when it fails or prints no JSON."""
    cpu0, t0 = _children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall, cpu = time.perf_counter() - t0, _children_cpu_seconds() - cpu0
    if proc.returncode != 0:
        raise BenchFailure(f"{name} exited {proc.returncode}:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise BenchFailure(f"{name} printed no result:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return json.loads(lines[-1]), wall, cpu
