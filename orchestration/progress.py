"""One line per job run for `make demo` and `tokenlake run`: a tqdm bar of what the run's tasks produced
(records, documents or tokens), its elapsed time and rate, updated while the run executes; on a non-TTY
(CI, a pipe) only the final line.

How the counts get out of a Dagster materialisation: the run gets a `MeteredExecutorResource` in place of
the `executor` resource (`execute_in_process(resources=...)`), whose executor hands every task result (in
process, as it finishes; from a cluster, as the map returns) to the active `RunMeter`. The tasks and their
results are the same ones the plain executor runs, so nothing stored changes. Jobs without executor tasks
(models, exact and near dedup, registrations, the run view) show the rows their materialisations report.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from tqdm import tqdm

from resources.executor import InProcessExecutor, Progress, TaskExecutor, TaskExecutorResource

# job -> (unit, the task stats key that counts it; None: rows of every file the task wrote)
UNITS: dict[str, tuple[str, str | None]] = {
    "raw_ingest": ("records", None),  # rows + rejects: every WARC record read
    "curate": ("documents", "html"),
    "minhash": ("documents", "documents"),
    "tokenize": ("tokens", "tokens"),
    "decontaminate": ("documents", "documents"),
}
DEFAULT_UNIT = "rows"
REFRESH_S = 0.5  # how often a live bar redraws (so the elapsed time runs while a task is busy)

# what libraries print to stderr on every run, dropped after a run that succeeded: KenLM reading an ARPA file
# (straight to file descriptor 2), and INFO records in Python logging's default format (wordllama calls
# `logging.basicConfig(level=INFO)` on import, after which e.g. alembic logs every run-storage migration)
# and Dagster's own console events below WARNING (a sensor tick logs through a console logger of its own)
NATIVE_NOISE = ("Loading the LM will be faster if you build a binary file.",)
INFO_PREFIX = "INFO:"
DAGSTER_EVENT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4} - dagster - (DEBUG|INFO) - ")


ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # Dagster colours its console lines on a terminal


def is_noise(line: str) -> bool:
    line = ANSI_COLOUR.sub("", line)
    return (
        not line.strip()
        or line.strip() in NATIVE_NOISE
        or line.startswith(INFO_PREFIX)
        or DAGSTER_EVENT.match(line) is not None
    )


_active: RunMeter | None = None  # the meter of the run executing in this process (runs are sequential)


def amount(result: object, key: str | None) -> int:
    """What one task result counts: its stats[key], or the rows of the files it wrote when key is None."""
    if key is None:
        return sum(int(getattr(f, "rows", 0)) for f in getattr(result, "files", ()))
    value = (getattr(result, "stats", None) or {}).get(key)
    return int(value) if isinstance(value, (int, float)) else 0


def rate_text(n: int, seconds: float, unit: str) -> str:
    """`1,234 tokens/s`, `0.5 records/s` (or `-` before anything was counted)."""
    if not n or seconds <= 0:
        return "-"
    rate = n / seconds
    return f"{rate:,.0f} {unit}/s" if rate >= 10 else f"{rate:.1f} {unit}/s"


def final_line(label: str, n: int | None, unit: str, seconds: float, ok: bool, rate: bool = True) -> str:
    """The line a run leaves behind: label, ok/FAILED, count, rate (of a metered job), elapsed."""
    counted = f"{n:>11,} {unit:<9}" if n is not None else " " * 21
    per_s = rate_text(n, seconds, unit) if rate and n is not None else ""
    return f"  {label:<62} {'ok' if ok else 'FAILED':<6}{counted} {per_s:>20} {seconds:6.1f} s"


class RunMeter:
    """The progress of one job run. Live (a bar redrawn in place) only on a TTY; `close` prints the final line."""

    def __init__(self, label: str, job: str, stream: IO[str] | None = None, live: bool | None = None) -> None:
        self.label, self.metered = label, job in UNITS  # metered: a job whose tasks run on the executor
        self.unit, self.key = UNITS.get(job, (DEFAULT_UNIT, None))
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.n, self.tasks_done, self.tasks_planned = 0, 0, 0
        self.t0 = time.perf_counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = (
            tqdm(
                desc=f"  {label}",
                unit=f" {self.unit}",
                unit_scale=False,
                file=self.stream,
                leave=False,
                ncols=max(shutil.get_terminal_size().columns, 80),  # a pty without a size reports 0
                nrows=max(shutil.get_terminal_size().lines, 2),  # (tqdm draws nothing when it sees no rows)
                bar_format="{desc}: {n:,}{unit} [{elapsed}{postfix}]",
                postfix="starting",
            )
            if self.live
            else None
        )
        self._ticker = threading.Thread(target=self._tick, daemon=True) if self.live else None
        if self._ticker is not None:
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(REFRESH_S):
            self._redraw()

    def _redraw(self) -> None:
        if self._bar is None:
            return
        with self._lock:
            seconds = time.perf_counter() - self.t0
            tasks = f"{self.tasks_done}/{self.tasks_planned} tasks" if self.tasks_planned else "no tasks yet"
            self._bar.n = self.n
            self._bar.set_postfix_str(f"{rate_text(self.n, seconds, self.unit)}, {tasks}", refresh=False)
            self._bar.refresh()

    def planned(self, tasks: int) -> None:
        with self._lock:
            self.tasks_planned += tasks

    def task_done(self, result: object) -> None:
        with self._lock:
            self.n += amount(result, self.key)
            self.tasks_done += 1
        self._redraw()

    def results(self, results: Iterable[object]) -> None:
        for r in results:
            self.task_done(r)

    def close(self, ok: bool, rows: int | None = None) -> float:
        """Stop the bar and print the final line; `rows` (from the materialisations) stands in for the count
        of a job that does not run executor tasks. Returns the elapsed seconds."""
        seconds = time.perf_counter() - self.t0
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        if self._bar is not None:
            self._bar.close()
        n = self.n if self.metered or self.tasks_planned else rows
        print(
            final_line(self.label, n, self.unit, seconds, ok, rate=self.metered),
            file=self.stream,
            flush=True,
        )
        return seconds

    def __enter__(self) -> RunMeter:
        global _active
        _active = self
        return self

    def __exit__(self, *exc: object) -> None:
        global _active
        _active = None


class _Counted:
    """`fn` that hands each result to the meter before returning it (in-process tasks only)."""

    def __init__(self, fn: Callable, meter: RunMeter) -> None:
        self.fn, self.meter = fn, meter

    def __call__(self, task: Any) -> Any:
        result = self.fn(task)
        self.meter.task_done(result)
        return result


class MeteredExecutor:
    """The configured executor, reporting each map's tasks and results to the active meter (if any)."""

    def __init__(self, inner: TaskExecutor) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:  # e.g. a cluster executor's tasks_per_node
        return getattr(self.inner, name)

    def map(self, fn: Callable, tasks: Sequence, progress: Progress | None = None) -> list:
        meter = _active
        if meter is None:
            return self.inner.map(fn, tasks, progress)
        meter.planned(len(tasks))
        if isinstance(self.inner, InProcessExecutor):
            return self.inner.map(_Counted(fn, meter), tasks, progress)
        results = self.inner.map(fn, tasks, progress)
        meter.results(results)
        return results


class MeteredExecutorResource(TaskExecutorResource):
    """`TaskExecutorResource` (same settings) whose executor reports to the active `RunMeter`."""

    def executor(self) -> TaskExecutor:
        return MeteredExecutor(super().executor())

    @classmethod
    def like(cls, resource: TaskExecutorResource) -> MeteredExecutorResource:
        """The same settings as `resource`."""
        return cls(**{name: getattr(resource, name) for name in TaskExecutorResource.model_fields})


class CapturedStderr:
    """Set `failed` before the block ends: a failed run shows everything it wrote to stderr."""

    failed: bool = False


@contextmanager
def native_stderr_captured(active: bool = True) -> Iterator[CapturedStderr]:
    """While a run executes, whatever is written to file descriptor 2 (by Python, or by a native library such
    as KenLM, which writes straight to it and would break the progress line) goes to a temporary file;
    afterwards it is written to stderr: all of it if the run failed, else all but the noise (`is_noise`).
    `active=False` (--verbose): nothing is captured."""
    state = CapturedStderr()
    if not active:
        yield state
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield state
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace")
            lines = [line for line in text.splitlines() if line.strip() and (state.failed or not is_noise(line))]
            if lines:
                print("\n".join(lines), file=sys.stderr, flush=True)
