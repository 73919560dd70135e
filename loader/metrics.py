"""Loader throughput and data-wait metrics in bounded memory.

tokens/s and data-wait fraction are running sums over wall time since `start` (the first record by default);
read latency percentiles come from a fixed-size uniform reservoir (Vitter's algorithm R), so memory does not
grow with the length of a run. Safe to record from the prefetch thread and the training loop at once.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence

DEFAULT_RESERVOIR = 4096  # latencies kept; p99 of 4096 uniform samples is within ~0.3 percentile points


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) of already sorted values, linear between closest ranks; None when empty."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    if not sorted_values:
        return None
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


class LoaderMetrics:
    """Counters for one loader: row-group read latency, tokens delivered and time the consumer waited."""

    def __init__(
        self, reservoir_size: int = DEFAULT_RESERVOIR, seed: int = 0, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        if isinstance(reservoir_size, bool) or not isinstance(reservoir_size, int) or reservoir_size < 1:
            raise ValueError(f"reservoir_size must be an int >= 1, got {reservoir_size!r}")
        self.reservoir_size = reservoir_size
        self._clock = clock
        self._rng = random.Random(seed)  # seeded: the same run reports the same percentiles
        self._lock = threading.Lock()
        self._reservoir: list[float] = []
        self._started: float | None = None
        self._last: float | None = None
        self.reads = 0
        self.read_seconds = 0.0
        self.batches = 0
        self.tokens = 0
        self.wait_seconds = 0.0

    def start(self) -> None:
        """Start the wall clock now (e.g. when the first batch is requested); otherwise the first record starts it."""
        with self._lock:
            self._started = self._clock()

    def record_read(self, seconds: float) -> None:
        """One row-group (or file) read that took `seconds`."""
        if not seconds >= 0.0:  # also catches NaN
            raise ValueError(f"read seconds must be >= 0, got {seconds!r}")
        with self._lock:
            if self._started is None:
                self._started = self._clock() - seconds
            self.reads += 1
            self.read_seconds += seconds
            if len(self._reservoir) < self.reservoir_size:
                self._reservoir.append(seconds)
            else:
                j = self._rng.randrange(self.reads)
                if j < self.reservoir_size:
                    self._reservoir[j] = seconds

    def record_batch(self, n_tokens: int, wait_seconds: float) -> None:
        """One batch of `n_tokens` handed to the consumer, which waited `wait_seconds` for it."""
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 0:
            raise ValueError(f"n_tokens must be an int >= 0, got {n_tokens!r}")
        if not wait_seconds >= 0.0:
            raise ValueError(f"wait_seconds must be >= 0, got {wait_seconds!r}")
        with self._lock:
            self.batch_delivered(n_tokens, wait_seconds)

    def batch_delivered(self, n_tokens: int, wait_seconds: float) -> None:
        """`record_batch` for the loader's own delivery path: unchecked and unlocked. It runs inside the
        consumer's `next()` (the data-wait a training step pays, ~20 us less without the lock right after a
        step); only that one thread writes these fields, and a `summary()` from another thread may at worst
        see one batch half-counted."""
        now = self._clock()
        if self._started is None:
            self._started = now - wait_seconds
        self._last = now
        self.batches += 1
        self.tokens += n_tokens
        self.wait_seconds += wait_seconds

    def summary(self) -> dict:
        """tokens_per_second and data_wait_fraction over [start, last batch]; read latency p50/p95/p99 (s)."""
        with self._lock:
            latencies = sorted(self._reservoir)
            elapsed = (self._last - self._started) if self._last is not None and self._started is not None else 0.0
            tokens, batches, wait = self.tokens, self.batches, self.wait_seconds
            reads, read_seconds = self.reads, self.read_seconds
        return {
            "batches": batches,
            "tokens": tokens,
            "elapsed_seconds": elapsed,
            "tokens_per_second": tokens / elapsed if elapsed > 0 else None,
            "data_wait_seconds": wait,
            "data_wait_fraction": min(1.0, wait / elapsed) if elapsed > 0 else None,
            "reads": reads,
            "read_seconds": read_seconds,
            "read_latency_p50": percentile(latencies, 50),
            "read_latency_p95": percentile(latencies, 95),
            "read_latency_p99": percentile(latencies, 99),
        }
