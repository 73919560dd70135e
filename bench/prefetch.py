"""Prefetcher bench: what the training loop's `next()` costs right after a step, and how soon a producer blocked
on a full buffer refills it; each against a baseline from the same run.

1. next() after a step: a consumer sleeps `--step-ms` (a training step: its caches go cold), then takes one item;
   median microseconds of that `next()` over `--steps` steps, for `loader.prefetch.Prefetcher` and for the
   design it replaced (a producer thread putting into a `queue.Queue(maxsize)` that the consumer `get`s from).
   Items are ready in both (the producer is far ahead), so this is the hand-over alone.
2. Refill: a full buffer of 8, the consumer takes 4 (half): milliseconds until it is full again, with the
   consumer's wake-up (ours) and with it switched off (the same Prefetcher, so only the producer's own 50 ms poll
   refills it); median of `--rounds`.
3. A consumer that takes items at once (no step): items/s over `--fast-items` items that each cost ~0.3 ms of
   numpy work, the adaptive Prefetcher (the loader's setting: it should build them in the consumer's thread)
   against a fixed read-ahead thread; and which mode the adaptive one ended in. Median of 5.

    python bench/prefetch.py [--steps 300] [--step-ms 16] [--rounds 20] [--fast-items 400] [--json]

Wall-clock measurements: on a loaded machine both sides slow down; the ratios are the result.
"""

from __future__ import annotations

import argparse
import itertools
import json
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loader.prefetch import Prefetcher  # noqa: E402


class QueuePrefetcher:
    """The baseline: one producer thread, a bounded queue.Queue, the consumer's blocking get."""

    def __init__(self, iterable, capacity: int) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=capacity)
        self.thread = threading.Thread(target=self._produce, args=(iter(iterable),), daemon=True)
        self.thread.start()

    def _produce(self, it) -> None:
        for item in it:
            self.queue.put(item)

    def __next__(self):
        return self.queue.get()


def next_after_step_us(make, steps: int, step_s: float) -> float:
    it = make(({"step": i} for i in itertools.count()), 8)
    time.sleep(0.2)  # the producer fills the buffer
    took = []
    for _ in range(steps):
        time.sleep(step_s)
        t0 = time.perf_counter()
        next(it)
        took.append(time.perf_counter() - t0)
    if isinstance(it, Prefetcher):
        it.close()
    return statistics.median(took) * 1e6


def refill_ms(wake: bool, rounds: int) -> float:
    pf = Prefetcher(itertools.count(), 8)
    if not wake:
        pf._shared.low = -1  # the consumer never wakes the producer: only its own poll refills the buffer
    took = []
    try:
        for _ in range(rounds):
            while pf.depth() < 8:
                time.sleep(0.001)
            time.sleep(0.06)  # the producer is inside its wait
            for _ in range(4):
                next(pf)
            t0 = time.perf_counter()
            while pf.depth() < 8:
                time.sleep(0.0002)
            took.append(time.perf_counter() - t0)
    finally:
        pf.close()
    return statistics.median(took) * 1e3


def numpy_items(n: int):
    """Items that cost ~0.3 ms of numpy work each (a packed batch stands in), built by whoever iterates."""
    import numpy as np

    src = np.arange(1 << 17, dtype=np.uint16)
    for _ in range(n):
        yield src.astype(np.int64) + 1


def fast_consumer_items_per_s(adaptive: bool, n: int) -> tuple[float, str]:
    """Items/s of a consumer that takes every item at once, and the read-ahead mode at the end."""
    pf = Prefetcher(numpy_items(n), 8, adaptive=adaptive)
    t0 = time.perf_counter()
    for _ in pf:
        pass
    rate = n / (time.perf_counter() - t0)
    mode = "inline" if pf.inline else "thread"
    pf.close()
    return rate, mode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-ms", type=float, default=16.0)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--fast-items", type=int, default=400)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (the table goes to stderr)")
    args = p.parse_args()
    out = sys.stderr if args.json else sys.stdout
    ours_us = next_after_step_us(Prefetcher, args.steps, args.step_ms / 1000)
    base_us = next_after_step_us(QueuePrefetcher, args.steps, args.step_ms / 1000)
    woken_ms, polled_ms = refill_ms(True, args.rounds), refill_ms(False, args.rounds)
    fast = [
        (fast_consumer_items_per_s(True, args.fast_items), fast_consumer_items_per_s(False, args.fast_items))
        for _ in range(5)
    ]
    adaptive_ips = statistics.median(a[0] for a, _ in fast)
    thread_ips = statistics.median(t[0] for _, t in fast)
    modes = sorted({a[1] for a, _ in fast})
    print("| measure | ours | baseline | baseline / ours |\n|---|---:|---:|---:|", file=out)
    print(
        f"| next() after a {args.step_ms:g} ms step, median us (baseline: queue.Queue) | {ours_us:.1f} | "
        f"{base_us:.1f} | {base_us / ours_us:.2f}x |",
        file=out,
    )
    print(
        f"| refill after draining to half, median ms (baseline: the producer's own poll) | {woken_ms:.2f} | "
        f"{polled_ms:.2f} | {polled_ms / woken_ms:.1f}x |",
        file=out,
    )
    print(
        f"| fast consumer, items/s (ours: adaptive, ended {'/'.join(modes)}; baseline: fixed thread) | "
        f"{adaptive_ips:.0f} | {thread_ips:.0f} | {thread_ips / adaptive_ips:.2f}x |",
        file=out,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "next_after_step_us": ours_us,
                    "queue_next_after_step_us": base_us,
                    "next_ratio_vs_queue": base_us / ours_us,
                    "refill_ms": woken_ms,
                    "poll_refill_ms": polled_ms,
                    "refill_ratio_vs_poll": polled_ms / woken_ms,
                    "fast_consumer_items_per_s": adaptive_ips,
                    "fixed_thread_items_per_s": thread_ips,
                    "fast_ratio_vs_fixed_thread": adaptive_ips / thread_ips,
                    "fast_consumer_modes": modes,
                    "steps": args.steps,
                    "step_ms": args.step_ms,
                    "rounds": args.rounds,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
