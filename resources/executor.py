"""The executor seam: where a state's tasks run. Assets call `executor.map(run_task, tasks)`.

A task is small and picklable and `run_task` is pure (it reads its inputs, writes data files where it is
told, returns paths and stats, never commits), so where it runs changes nothing in the result: the commit
orders results by task index. This module ships the in-process executor (the default); a cluster executor
implements the same `map`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import dagster as dg
from pydantic import Field

T = TypeVar("T")
R = TypeVar("R")
Progress = Callable[[int, int], None]  # (tasks done, tasks planned)


class TaskExecutor(Protocol):
    """Runs `fn` over every task; returns one result per task (any order: results carry their task index)."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress | None = None) -> list[R]: ...


class InProcessExecutor:
    """Every task in this process, one after another in plan order. A failing task raises at once: the step
    fails and nothing is committed (files already written are swept as orphans)."""

    def map(self, fn: Callable[[T], R], tasks: Sequence[T], progress: Progress | None = None) -> list[R]:
        out = []
        for task in tasks:
            out.append(fn(task))
            if progress is not None:
                progress(len(out), len(tasks))
        return out


class TaskExecutorResource(dg.ConfigurableResource):
    """Where the tasks of every state run. `in_process` (default): in the Dagster step's own process."""

    kind: str = Field(
        default="in_process",
        pattern="^in_process$",
        description="in_process: tasks run in the step's process, in plan order",
    )

    def executor(self) -> TaskExecutor:
        return InProcessExecutor()
