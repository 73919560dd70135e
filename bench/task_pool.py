"""An executor for benches that measures every task on its own: each task runs in a fresh spawned process
(`max_tasks_per_child=1`), so the task's peak RSS (ru_maxrss at its end) is its own and not the high-water
mark of whatever ran before it in a reused worker. Same `.map(fn, tasks, progress)` as resources.executor.

Each `map` call is recorded as one stage: tasks, wall seconds, CPU seconds and bytes read summed over the
tasks, and the largest task peak RSS. CPU and bytes read are measured around `fn(task)` only (not the
child's start-up and imports); the peak RSS includes them (what a worker really holds).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path


def read_bytes() -> int:
    """Bytes this process has read through read/pread syscalls so far (`rchar` of /proc/self/io; 0 elsewhere):
    Parquet and metadata files read by pyarrow and pyiceberg are counted, page cache or not."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/self/io").read_text().splitlines())
    except OSError:
        return 0
    return int(fields["rchar"])


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass(frozen=True)
class TaskMeasure:
    """One task as its own process saw it."""

    cpu_s: float
    bytes_read: int
    peak_rss_bytes: int


@dataclass
class StageMeasure:
    """One `map` call: its tasks' measures and its wall time."""

    name: str
    wall_s: float
    tasks: list[TaskMeasure] = field(default_factory=list)

    def summary(self) -> dict:
        return {
            "name": self.name,
            "tasks": len(self.tasks),
            "wall_s": self.wall_s,
            "cpu_s": sum(t.cpu_s for t in self.tasks),
            "bytes_read": sum(t.bytes_read for t in self.tasks),
            "max_task_peak_rss_bytes": max((t.peak_rss_bytes for t in self.tasks), default=0),
        }


def measured(fn: Callable, task: object) -> tuple[object, TaskMeasure]:
    """Run `fn(task)` in this (fresh) process and measure it."""
    cpu0, read0 = cpu_seconds(), read_bytes()
    result = fn(task)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return result, TaskMeasure(cpu_seconds() - cpu0, read_bytes() - read0, peak)


class FreshProcessExecutor:
    """Every task in a fresh spawned process, `workers` at a time; results in task order."""

    def __init__(self, workers: int = 2) -> None:
        self.workers = workers
        self.stages: list[StageMeasure] = []

    def map(self, fn: Callable, tasks: Sequence, progress: Callable[[int, int], None] | None = None) -> list:
        stage = StageMeasure(getattr(fn, "__name__", repr(fn)), 0.0)
        t0 = time.perf_counter()
        out: list = [None] * len(tasks)
        measures: list[TaskMeasure | None] = [None] * len(tasks)
        if tasks:
            with ProcessPoolExecutor(
                max_workers=min(self.workers, len(tasks)), mp_context=get_context("spawn"), max_tasks_per_child=1
            ) as pool:
                futures = {pool.submit(measured, fn, task): k for k, task in enumerate(tasks)}
                for done, future in enumerate(as_completed(futures), 1):
                    k = futures[future]
                    out[k], measures[k] = future.result()
                    if progress is not None:
                        progress(done, len(tasks))
        stage.wall_s = time.perf_counter() - t0
        stage.tasks = [m for m in measures if m is not None]
        self.stages.append(stage)
        return out
