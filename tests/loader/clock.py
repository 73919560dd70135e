"""A clock for `loader.prefetch.Prefetcher(clock=...)` that the test advances: a "training step" is what the test
says it is, not what a loaded machine made of a sleep (how the real timings play out: bench/prefetch.py)."""

from __future__ import annotations


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def step(self, seconds: float) -> None:
        self.now += seconds
