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
4. A training loop, then a fast one (the adaptive decisions on a real clock, which the tests drive with their
   own): `--loop-items` of those items with a `--step-ms` step after each, data-wait fraction (time in `next()`
   over the loop's time) with the adaptive Prefetcher against building each item in the loop itself (no
   read-ahead), and its mode after them (thread expected); then `--fast-items` taken at once, and its mode after
   them (inline expected). Median of 3.

    python bench/prefetch.py [--steps 300] [--step-ms 16] [--rounds 20] [--fast-items 400] [--loop-items 100]
                             [--json]

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
    mode = _mode(pf)
    pf.close()
    return rate, mode


def _mode(pf: Prefetcher) -> str:
    return "inline" if pf.inline else "thread"


def waited_fraction(it, n: int, step_s: float) -> float:
    """Share of a loop's wall time spent in `next(it)`, over `n` items with a `step_s` sleep (a step) after each."""
    wait, t0 = 0.0, time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        next(it)
        wait += time.perf_counter() - t
        time.sleep(step_s)
    return wait / (time.perf_counter() - t0)


def loop_then_fast(loop_items: int, step_s: float, fast_items: int) -> tuple[float, float, str, str]:
    """(adaptive data-wait fraction, no read-ahead data-wait fraction, adaptive mode after the loop, after the fast
    items) for a training loop of `loop_items` steps followed by `fast_items` taken at once."""
    pf = Prefetcher(numpy_items(loop_items + fast_items), 8, adaptive=True)
    adaptive = waited_fraction(pf, loop_items, step_s)
    after_loop = _mode(pf)
    for _ in range(fast_items):
        next(pf)
    after_fast = _mode(pf)
    pf.close()
    inline = waited_fraction(numpy_items(loop_items), loop_items, step_s)
    return adaptive, inline, after_loop, after_fast


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-ms", type=float, default=16.0)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--fast-items", type=int, default=400)
    p.add_argument("--loop-items", type=int, default=100)
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
    loops = [loop_then_fast(args.loop_items, args.step_ms / 1000, args.fast_items) for _ in range(3)]
    loop_wait = statistics.median(x[0] for x in loops)
    inline_wait = statistics.median(x[1] for x in loops)
    after_loop, after_fast = sorted({x[2] for x in loops}), sorted({x[3] for x in loops})
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
    print(
        f"| training loop ({args.step_ms:g} ms steps), data-wait fraction (ours: adaptive, mode after it "
        f"{'/'.join(after_loop)}, after {args.fast_items} fast items {'/'.join(after_fast)}; baseline: no "
        f"read-ahead) | {loop_wait:.4f} | {inline_wait:.4f} | {inline_wait / max(loop_wait, 1e-9):.1f}x |",
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
                    "loop_wait_fraction": loop_wait,
                    "no_readahead_loop_wait_fraction": inline_wait,
                    "loop_wait_ratio_vs_no_readahead": inline_wait / max(loop_wait, 1e-9),
                    "modes_after_loop": after_loop,
                    "modes_after_fast": after_fast,
                    "steps": args.steps,
                    "step_ms": args.step_ms,
                    "rounds": args.rounds,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
