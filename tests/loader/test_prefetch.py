"""Prefetcher: order, bounded read-ahead, error propagation, shutdown."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loader.prefetch import (
    AWAY_SECONDS,
    CLOSE_TIMEOUT_SECONDS,
    FIRST_WINDOW,
    MIN_WINDOW,
    STANDBY_SECONDS,
    Prefetcher,
    adaptive_decision,
)
from tests.loader.clock import Clock


def wait_until(predicate, timeout: float = 10.0) -> None:
    """Poll `predicate` until it holds; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not reached within {timeout} s")
        time.sleep(0.005)


class CountingSource:
    """An endless source that counts how many items it has built and records when it is closed."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.built = 0
        self.closed = threading.Event()
        self.fail_at = fail_at

    def __iter__(self):
        try:
            while True:
                if self.built == self.fail_at:
                    raise RuntimeError(f"row group {self.built} unreadable")
                self.built += 1
                yield self.built - 1
        finally:
            self.closed.set()


@given(items=st.lists(st.integers(), max_size=60), capacity=st.integers(1, 8))
def test_yields_every_item_in_order(items, capacity):
    with Prefetcher(items, capacity) as pf:
        assert list(pf) == items
        assert pf.consumed == len(items)
        assert list(pf) == []  # exhausted stays exhausted


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, "2"])
def test_rejects_bad_capacity(capacity):
    with pytest.raises(ValueError, match="capacity"):
        Prefetcher([1], capacity)


@pytest.mark.parametrize("capacity", [1, 3])
def test_producer_blocks_capacity_ahead(capacity):
    source = CountingSource()
    pf = Prefetcher(source, capacity)
    try:
        assert next(pf) == 0
        # queue full (capacity items) + one built item held in the blocked put
        wait_until(lambda: pf.blocked_puts >= 1 and source.built == 1 + capacity + 1)
        time.sleep(0.2)
        assert source.built == 1 + capacity + 1
        assert pf.produced == 1 + capacity
        assert pf.depth() == capacity
        assert [next(pf) for _ in range(5)] == [1, 2, 3, 4, 5]  # reading resumes the producer
    finally:
        assert pf.close()


def test_producer_exception_reaches_consumer_after_earlier_items():
    source = CountingSource(fail_at=4)
    with Prefetcher(source, 2) as pf:
        got = []
        with pytest.raises(RuntimeError, match="row group 4 unreadable"):
            for item in pf:
                got.append(item)
        assert got == [0, 1, 2, 3]
        with pytest.raises(StopIteration):
            next(pf)
    assert source.closed.is_set()


def test_close_with_full_queue_returns_within_bound_and_closes_source():
    source = CountingSource()
    pf = Prefetcher(source, 4)
    wait_until(lambda: pf.blocked_puts >= 1)
    started = time.monotonic()
    assert pf.close() is True
    assert time.monotonic() - started < CLOSE_TIMEOUT_SECONDS
    assert not pf.alive
    assert source.closed.is_set()  # the generator's finally ran: its files would be closed
    assert pf.depth() == 0  # queued items dropped, their memory freed
    with pytest.raises(StopIteration):
        next(pf)


def test_close_gives_up_on_a_producer_stuck_in_its_source():
    release = threading.Event()

    def stuck():
        yield 0
        release.wait(30)  # a read that does not return
        yield 1

    pf = Prefetcher(stuck(), 2)
    assert next(pf) == 0
    assert pf.close(timeout=0.3) is False  # reports that the thread is still running, does not hang
    release.set()
    wait_until(lambda: not pf.alive)  # it ends at its next put (stop is set)


def test_consumer_wait_is_measured():
    gate = threading.Event()

    def slow():
        gate.wait(10)
        yield "batch"

    pf = Prefetcher(slow(), 1)
    timer = threading.Timer(0.2, gate.set)
    timer.start()
    try:
        assert next(pf) == "batch"
        assert pf.last_wait_seconds >= 0.19  # blocked at least until the gate opened
        assert pf.wait_seconds == pf.last_wait_seconds
    finally:
        timer.cancel()
        pf.close()


def test_forgotten_prefetcher_stops_its_thread():
    source = CountingSource()
    pf = Prefetcher(source, 2)
    wait_until(lambda: pf.blocked_puts >= 1)  # noqa: F821 (pf is deleted below, after the wait)
    thread = pf._thread
    del pf
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()
    assert source.closed.is_set()


class Tracked:
    """An item that records which thread freed it."""

    made = 0
    freed_on: list[str] = []

    def __init__(self) -> None:
        Tracked.made += 1

    def __del__(self) -> None:
        Tracked.freed_on.append(threading.current_thread().name)


def test_retired_items_are_freed_on_the_producer_thread_and_dropped_on_close():
    Tracked.made, Tracked.freed_on = 0, []
    pf = Prefetcher((Tracked() for _ in range(40)), 4)
    try:
        for _ in range(30):
            pf.retire(next(pf))  # the consumer's only reference goes with it
        wait_until(lambda: len(Tracked.freed_on) >= 28)
        assert set(Tracked.freed_on[:28]) == {"tokenlake-prefetch"}, Tracked.freed_on
    finally:
        assert pf.close()
    gc.collect()
    assert len(Tracked.freed_on) == Tracked.made > 30  # retired, buffered, in flight: nothing kept after close
    pf.retire(Tracked())  # after close: dropped at once, by the caller
    assert len(Tracked.freed_on) == Tracked.made


def test_a_consumer_at_half_capacity_wakes_the_blocked_producer(monkeypatch):
    """Only the consumer's wake-up can refill the buffer here: the producer's own poll is an hour. How fast the
    wake-up is, against that poll, is measured in bench/prefetch.py (wall-clock: not asserted in a test)."""
    import loader.prefetch

    monkeypatch.setattr(loader.prefetch, "_POLL_SECONDS", 3600.0)
    source = CountingSource()
    pf = Prefetcher(source, 8)
    try:
        wait_until(lambda: pf.blocked_puts >= 1 and pf.depth() == 8)
        time.sleep(0.1)  # the producer is inside its wait
        for _ in range(3):  # 8 -> 5: above half, no wake-up: the producer keeps waiting
            next(pf)
        time.sleep(0.3)
        assert pf.depth() == 5
        next(pf)  # 5 -> 4 = capacity // 2: the consumer wakes it
        wait_until(lambda: pf.depth() == 8)  # (the timeout only stops a hung test)
    finally:
        monkeypatch.setattr(loader.prefetch, "_POLL_SECONDS", 0.05)
        assert pf.close()


def test_a_waiting_consumer_is_woken_by_the_first_item_the_wanted_one_and_the_end(monkeypatch):
    """The consumer that caught up is not woken for every item (module doc): only the first (its gather window
    starts), the one that makes `wanted` and the end."""
    import loader.prefetch as lp

    shared = lp._Shared(8)
    shared.consumer_waiting, shared.wanted = True, 4
    woken = []
    monkeypatch.setattr(shared.cv, "notify_all", lambda: woken.append(len(shared.items)))
    for i in range(6):
        assert lp._put(shared, i)
    assert woken == [1, 4]
    assert lp._put(shared, lp._END)
    assert woken == [1, 4, 7]


def test_a_producer_that_waits_for_the_consumer_still_gets_each_item_through():
    """Item k + 1 is built only after the consumer took item k, so the buffer never holds half its capacity: the
    consumer's wait for more is bounded (GATHER_SECONDS) and every item arrives (a hang fails the test)."""
    taken = [threading.Event() for _ in range(20)]

    def lockstep():
        for k in range(20):
            yield k
            if not taken[k].wait(10):
                return

    pf = Prefetcher(lockstep(), 8)
    got = []
    try:
        for k in range(20):
            got.append(next(pf))
            taken[k].set()
    finally:
        assert pf.close()
    assert got == list(range(20))


class Recorded:
    """A source that records which thread built each item, fails at `fail_at` and says when it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.threads: list[str] = []
        self.closed = threading.Event()

    def __iter__(self):
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise RuntimeError(f"row group {i} unreadable")
                self.threads.append(threading.current_thread().name)
                yield i
        finally:
            self.closed.set()


def test_adaptive_starts_inline_and_reads_ahead_once_the_consumer_works_between_items():
    """An adaptive Prefetcher builds inline for a consumer that takes items at once (its armed producer ends
    unused); once the consumer works between items (20 ms steps on its clock) it gets the read-ahead thread at the
    window's decision and keeps it through 10 ms steps; the items arrive in order throughout. (Pausing the thread
    for a consumer that only waits is the rule below on given seconds, and `_pause` in the deadlock test.)"""
    clock = Clock()
    source = Recorded(200)
    pf = Prefetcher(source, 4, adaptive=True, standby_seconds=3600, clock=clock)
    got = [next(pf) for _ in range(40)]  # no work between items
    assert pf.inline and pf.switches == 0 and not pf.alive
    assert set(source.threads) == {threading.current_thread().name}
    for _ in range(5):  # 20 ms of work per item: 16 counted items average > 1 ms away at the second one
        got.append(next(pf))
        clock.step(0.02)
    assert not pf.inline and pf.switches == 1 and pf.alive
    for _ in range(30):
        got.append(next(pf))
        clock.step(0.01)
    assert not pf.inline and pf.switches == 1
    assert "tokenlake-prefetch" in source.threads
    got.extend(pf)
    assert got == list(range(200))
    assert source.closed.is_set() and pf.close()


def test_adaptive_start_reads_ahead_during_a_first_step_and_stays_inline_for_a_fast_consumer():
    """After the first item a producer waits `standby_seconds` for the consumer's next call: once it has given up
    waiting (a consumer still in its first training step) the second item is read ahead; a consumer back before
    that cancels it and builds every item in its own thread."""
    me = threading.current_thread().name
    source = Recorded(200)
    pf = Prefetcher(source, 8, adaptive=True, standby_seconds=0)
    next(pf)
    wait_until(lambda: pf._shared.standby == "go")  # the consumer is still away when the producer stops waiting
    assert next(pf) == 1 and not pf.inline and pf.switches == 1
    assert source.threads[:2] == [me, "tokenlake-prefetch"]
    assert pf._window_items == FIRST_WINDOW  # the first decision on the thread comes after the short window
    assert pf.close() and source.closed.is_set()

    source = Recorded(200)
    pf = Prefetcher(source, 8, adaptive=True, standby_seconds=3600, clock=Clock())
    assert [next(pf) for _ in range(30)] == list(range(30))
    assert pf.inline and pf.switches == 0 and not pf.alive  # the armed producer ended unused
    assert set(source.threads) == {me}
    assert pf.close() and source.closed.is_set()


def test_adaptive_first_thread_decision_needs_time_away_not_just_a_ratio():
    """The decision rule on given seconds (no clock: how fast a consumer really is lives in bench/prefetch.py).
    Building inline, a consumer away only microseconds an item stays inline even where its time away exceeds the
    (near-zero) build time; one away >= AWAY_SECONDS an item, more than half the build time, gets the thread
    after one counted item; reading ahead, a window decides only when full."""
    assert FIRST_WINDOW == 9 < MIN_WINDOW  # one 8-step build and the wait for the next
    assert AWAY_SECONDS == 0.001 < STANDBY_SECONDS == 0.002
    # microseconds away, more than the build time: a thread's hand-overs would cost more
    assert adaptive_decision(True, 8, 8e-6, 1e-6, MIN_WINDOW) is None
    assert adaptive_decision(True, MIN_WINDOW, 16e-6, 2e-6, MIN_WINDOW) == "window"
    # a first training step of 20 ms after items that each took 1 ms to build
    assert adaptive_decision(True, 1, 0.02, 0.001, FIRST_WINDOW) == "thread"
    assert adaptive_decision(True, MIN_WINDOW, 0.02, 0.001, MIN_WINDOW) == "thread"  # 1.25 ms an item on average
    assert adaptive_decision(True, MIN_WINDOW, 0.015, 0.001, MIN_WINDOW) == "window"  # under 1 ms an item
    assert adaptive_decision(True, 4, 0.01, 0.03, MIN_WINDOW) is None  # away, but less than half the build time
    # reading ahead: a consumer that only waits pauses the producer at the window's end, not before
    assert adaptive_decision(False, FIRST_WINDOW - 1, 1e-5, 0.01, FIRST_WINDOW) is None
    assert adaptive_decision(False, FIRST_WINDOW, 1e-5, 0.01, FIRST_WINDOW) == "inline"
    assert adaptive_decision(False, MIN_WINDOW, 0.16, 0.001, MIN_WINDOW) == "window"  # a training loop keeps it
    # the floor is a parameter (a Prefetcher's away_seconds): 1.25 ms an item is not 5
    assert adaptive_decision(True, MIN_WINDOW, 0.02, 0.001, MIN_WINDOW, away_seconds=0.005) == "window"
    assert adaptive_decision(True, MIN_WINDOW, 0.08, 0.001, MIN_WINDOW, away_seconds=0.005) == "thread"


@pytest.mark.parametrize("field", ["standby_seconds", "away_seconds"])
@pytest.mark.parametrize("value", [-0.001, "2 ms", None, True, float("nan")])
def test_rejects_bad_adaptive_seconds(field, value):
    with pytest.raises(ValueError, match=field):
        Prefetcher(range(3), 2, adaptive=True, **{field: value})


def test_adaptive_inline_failure_and_close_reach_the_consumer_and_the_source():
    source = Recorded(100, fail_at=50)  # a consumer that takes every item at once: built inline
    pf = Prefetcher(source, 2, adaptive=True, standby_seconds=3600, clock=Clock())
    got = []
    with pytest.raises(RuntimeError, match="row group 50 unreadable"):
        for item in pf:
            got.append(item)
    assert got == list(range(50)) and pf.inline and pf.switches == 0
    assert source.closed.is_set()
    with pytest.raises(StopIteration):
        next(pf)

    source = Recorded(10**6)
    pf = Prefetcher(source, 2, adaptive=True, standby_seconds=3600, clock=Clock())
    for _ in range(30):
        next(pf)
    assert pf.inline and not pf.alive  # no thread: the source stays open for the consumer
    assert not source.closed.is_set()
    assert pf.close() and source.closed.is_set()  # close() closes it in the consumer's thread


def test_pausing_a_producer_blocked_on_a_full_buffer_does_not_deadlock():
    source = CountingSource()
    pf = Prefetcher(source, 2, adaptive=True)
    pf._resume()  # adaptive Prefetchers start inline; read ahead until the buffer is full
    try:
        wait_until(lambda: pf.blocked_puts >= 1)
        pf._pause()  # the consumer joins the producer: it must leave its blocked put (one item over)
        assert pf.inline
        assert [next(pf) for _ in range(6)] == list(range(6))
    finally:
        assert pf.close()
