"""Worker processes for tests that always end: a bounded wait, then SIGKILL; never a wait on SIGTERM.

Why not `multiprocessing.Pool`: its `__exit__` calls `terminate()`, which SIGTERMs the workers and joins them
with no time limit. In a test process SIGTERM can be ignored: Dagster's `capture_interrupts` (entered by every
`dg.materialize`) gives SIGTERM SIGINT's handler when it exits, and a background shell job starts with SIGINT
ignored. Spawned workers inherit an ignored signal, so a worker blocked on the pool's queue lock never ended
and `make test` hung until the suite's hang guard. tests/conftest.py puts SIGTERM back between tests; this
module does not depend on it.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

# A worker that has not finished by then is hung, not slow: the slowest use (4 committers on a loaded
# 2-core machine) takes ~20 s.
WAIT_S = 300.0


@contextmanager
def spawned(target: Callable, args: Sequence[tuple], wait_s: float = WAIT_S) -> Iterator[list[mp.Process]]:
    """Start `target(*a)` in one spawned process per `a` in `args` and yield the processes; on leaving, wait
    at most `wait_s` seconds for them all (none when the body raised), SIGKILL whatever is left and reap it."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=target, args=a, daemon=True) for a in args]
    for p in procs:
        p.start()
    failed = True
    try:
        yield procs
        failed = False
    finally:
        deadline = time.monotonic() + (0.0 if failed else wait_s)
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)


def exit_codes(target: Callable, args: Sequence[tuple], wait_s: float = WAIT_S) -> list[int | None]:
    """Run `target(*a)` for each `a` in its own spawned process, all at once; their exit codes in `args` order
    (0: returned; 1: raised, the traceback is on stderr; -9: killed after `wait_s`)."""
    with spawned(target, args, wait_s) as procs:
        pass
    return [p.exitcode for p in procs]
