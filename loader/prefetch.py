"""Bounded prefetch: one daemon thread reads ahead of the consumer into a buffer of at most `capacity` items.

The buffer is the only one, so a stalled consumer holds at most `capacity` items (plus the one the producer
is building) in memory: the producer blocks on a full buffer. The producer's waits are timed so that `close()`
can stop it within a bound even while the buffer is full; a producer exception reaches the consumer.

The consumer's `next()` is the data-wait a training step sees, so its common case takes no lock: it pops from
a deque (atomic under the GIL) and wakes a producer blocked on a full buffer only once the buffer has drained
to half (one Condition round trip per capacity/2 items, not per item). Measured right after a 16 ms training
step on a 2-core VM, where everything a woken thread touches is cold: queue.Queue.get ~66 us, a deque pop ~25.

The same hysteresis on the other side: a consumer that found the buffer empty (it is faster than the producer)
takes the next item once the buffer holds capacity/2 again, or `GATHER_SECONDS` after the first one arrived,
or at the end, instead of waking for every item: a consumer woken per item takes the GIL from the producer
thread once per item while it builds the next ones. Measured in process, the loader's 60 steps after its first
batch with an infinitely fast consumer (interleaved, 8 rounds): 59.4M -> 72.3M tokens/s; over 400 steps no
difference beyond noise (76.1M / 77.4M). The first item is taken as soon as it is there.

`adaptive=True` (the loader's setting) reads ahead only where it helps. A producer thread only overlaps with a
consumer that spends its time outside the GIL (a training step on an accelerator, sleeping, I/O); a consumer
that takes each item at once gains nothing from it and pays the thread's hand-overs: on this 2-core VM the
loader's in-process rate with its read-ahead thread moved between 55M and 84M tokens/s from run to run,
against 85-95M building in the consumer's own thread. So an adaptive Prefetcher builds the first item in the
consumer's thread and then arms a producer that waits `STANDBY_SECONDS` for the consumer's next call: a
consumer still away by then (a training step) has its second item read ahead and keeps the thread; one that
is back at once cancels it (the producer only waited) and builds the items itself. Building inline, the
thread starts as soon as the items counted since the last decision show the consumer away (between its
`next()` calls) at least `AWAY_SECONDS` an item and more than `THREAD_ABOVE` of the build time. Reading
ahead, over each window of `2 * capacity` items (at least `MIN_WINDOW`; the first one `FIRST_WINDOW` items:
one 8-step build and the wait for the next) it compares the time away with what the consumer waited for:
under `INLINE_BELOW` of the two, the producer is paused at its next item and the consumer builds the items
itself, after the buffered ones. Measured (interleaved rounds of the loader bench's 60 steps): starting on
the thread spent a fast consumer's first window on hand-overs (50.4M -> 55.5M tokens/s inline from the start,
57.5M without read-ahead); starting inline without the armed producer doubled the data-wait of a 1M
tokens/s/rank consumer after its first batch (0.27% -> 0.55-0.63%: its second batch built in its own
thread), with it 0.21-0.27%. The order of items never changes (one iterator, advanced by one thread at a
time).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

_END = object()  # the producer's iterator is exhausted
_POLL_SECONDS = 0.05  # how often a blocked put / get looks at the stop event (and recovers a missed wake-up)
GATHER_SECONDS = 0.002  # the longest a consumer that caught up waits for more items once one is there
INLINE_BELOW = 0.1  # adaptive: build inline when time away < this share of (away + waited) over a window
THREAD_ABOVE = 0.5  # adaptive: read ahead when time away > this share of the inline build time
MIN_WINDOW = 16  # adaptive: items a decision looks at, at least (the loader builds 8 steps at a time)
FIRST_WINDOW = 9  # adaptive: items the first decision looks at (one 8-step build and the wait for the next)
AWAY_SECONDS = 0.001  # adaptive, inline: read ahead only for a consumer away at least this long an item
STANDBY_SECONDS = 0.002  # adaptive: after the first item, a consumer not back within this gets the thread
CLOSE_TIMEOUT_SECONDS = 5.0


def adaptive_decision(
    inline: bool, items: int, away: float, spent: float, window_items: int, away_seconds: float = AWAY_SECONDS
) -> str | None:
    """What an adaptive Prefetcher does after an item, from its window: `items` counted, seconds `away` (between
    the consumer's `next()` calls) and `spent` (in them). "thread": start reading ahead (building inline, a
    consumer away >= `away_seconds` an item and more than THREAD_ABOVE of the build time); "inline": pause the
    producer (reading ahead, a full window away under INLINE_BELOW of away + waited); "window": a full window
    with no change; None: keep counting."""
    if inline and items and away >= away_seconds * items and away > THREAD_ABOVE * spent:
        return "thread"
    if items < window_items:
        return None
    return "inline" if not inline and away < INLINE_BELOW * (away + spent) else "window"


class _Failure:
    """An exception raised by the producer, carried through the buffer to the consumer."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Shared:
    """What the producer thread and the consumer share; the thread holds this, never the Prefetcher, so a
    forgotten Prefetcher is collected and its __del__ stops the thread."""

    __slots__ = (
        "retired",
        "items",
        "capacity",
        "low",
        "cv",
        "stop",
        "pause",
        "iterator_closed",
        "producer_waiting",
        "consumer_waiting",
        "wanted",
        "produced",
        "blocked_puts",
        "standby",
        "standby_seconds",
    )

    def __init__(self, capacity: int, standby_seconds: float = STANDBY_SECONDS) -> None:
        self.items: collections.deque = collections.deque()
        self.retired: collections.deque = collections.deque()  # consumed items the producer thread releases
        self.capacity = capacity
        self.low = capacity // 2  # the consumer wakes a blocked producer at or below this many items
        self.cv = threading.Condition(threading.Lock())
        self.stop = threading.Event()
        self.pause = threading.Event()  # adaptive: the producer returns before its next item, iterator open
        self.iterator_closed = False
        self.producer_waiting = False
        self.consumer_waiting = False
        self.wanted = 1  # items a waiting consumer waits for (it is also woken by the first one)
        self.produced = 0
        self.blocked_puts = 0
        self.standby = None  # adaptive start: "waiting" (producer armed), "go" (it reads ahead), "cancelled"
        self.standby_seconds = standby_seconds  # how long an armed producer waits for the consumer's next call


def _release_retired(shared: _Shared) -> None:
    """Drop the consumed items handed back with `Prefetcher.retire`: their memory is freed on this thread."""
    retired = shared.retired
    while retired:
        try:
            retired.popleft()
        except IndexError:
            return


def _is_final(item: Any) -> bool:
    """The last item the consumer gets from a stream: its end or the producer's failure."""
    return item is _END or isinstance(item, _Failure)


def _put(shared: _Shared, item: Any) -> bool:
    """Append `item`, blocking while the buffer is full; False when stopped before it fitted. A waiting consumer
    is woken by the first item, by the `wanted`-th and by the final one (the end or a failure)."""
    with shared.cv:
        if len(shared.items) >= shared.capacity:
            shared.blocked_puts += 1
            while len(shared.items) >= shared.capacity:
                if shared.stop.is_set():
                    return False
                if shared.pause.is_set():  # the consumer waits for this thread to end: one item over
                    break
                shared.producer_waiting = True
                shared.cv.wait(_POLL_SECONDS)  # a wake-up missed by the consumer's unlocked check costs <= this
            shared.producer_waiting = False
        if shared.stop.is_set():
            return False
        shared.items.append(item)
        if shared.consumer_waiting and (len(shared.items) in (1, shared.wanted) or _is_final(item)):
            shared.cv.notify_all()
    return True


def _close_iterator(iterator: Iterator[Any], shared: _Shared) -> None:
    shared.iterator_closed = True
    close = getattr(iterator, "close", None)
    if close is not None:  # a generator's finally blocks (open files) run on the thread that ran it
        try:
            close()
        except Exception:  # noqa: BLE001 - shutdown of a source that already failed or ended
            pass


def _produce(iterator: Iterator[Any], shared: _Shared) -> None:
    """The producer thread: every item of `iterator`, then _END, or a _Failure with what it raised; when
    paused, it returns before its next item and leaves the iterator open for the consumer."""
    paused = False
    if shared.standby == "waiting":  # armed after the consumer's first item: read ahead unless it is back soon
        with shared.cv:
            shared.cv.wait_for(lambda: shared.standby != "waiting" or shared.stop.is_set(), shared.standby_seconds)
            if shared.standby == "cancelled" or shared.stop.is_set():
                return  # the consumer builds inline (or closed): the iterator stays open for it
            shared.standby = "go"
    try:
        while True:
            _release_retired(shared)  # before building the next item: its memory can then be reused for it
            if shared.pause.is_set():
                paused = True
                return
            try:
                item = next(iterator)
            except StopIteration:
                break
            if shared.stop.is_set() or not _put(shared, item):
                return
            shared.produced += 1
        _put(shared, _END)
    except BaseException as exc:  # noqa: BLE001 - everything the producer raises belongs to the consumer
        _put(shared, _Failure(exc))
    finally:
        if not paused:
            _close_iterator(iterator, shared)


class Prefetcher:
    """Iterate `iterable` on a daemon thread, at most `capacity` items ahead of the consumer; `adaptive`: in the
    consumer's own thread while the consumer takes items faster than the thread makes them (module doc), with
    `standby_seconds` and `away_seconds` in place of STANDBY_SECONDS and AWAY_SECONDS, and `clock` (seconds) for
    the consumer's time away and waited: tests drive the decisions with their own clock and settings, so they
    do not depend on how loaded the machine is (the real timings: bench/prefetch.py)."""

    def __init__(
        self,
        iterable: Iterable[Any],
        capacity: int,
        *,
        name: str = "tokenlake-prefetch",
        adaptive: bool = False,
        standby_seconds: float = STANDBY_SECONDS,
        away_seconds: float = AWAY_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"Prefetcher capacity must be an int >= 1, got {capacity!r}")
        for label, value in (("standby_seconds", standby_seconds), ("away_seconds", away_seconds)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"Prefetcher {label} must be a number of seconds >= 0, got {value!r}")
        self.capacity = capacity
        self.adaptive = bool(adaptive)
        self._iterator = iter(iterable)
        self._name = name
        self._shared = _Shared(capacity, float(standby_seconds))
        self.away_seconds = float(away_seconds)
        self._clock = clock
        self._done = False  # the consumer has seen the end or an error, or closed
        self.consumed = 0
        self.wait_seconds = 0.0  # total time the consumer spent blocked in __next__ (or building inline)
        self.last_wait_seconds = 0.0
        self.inline = self.adaptive  # adaptive: the consumer builds the items itself (no thread reads ahead)
        self.switches = 0  # adaptive: changes between reading ahead and building inline
        self._window = [0, 0.0, 0.0]  # adaptive: items, seconds away, seconds waited (or built) in this window
        # adaptive: items the next decision looks at (FIRST_WINDOW, then max(2 * capacity, MIN_WINDOW))
        self._window_items = FIRST_WINDOW
        self._returned_at: float | None = None
        self._thread: threading.Thread | None = None if self.adaptive else self._start()

    def _start(self) -> threading.Thread:
        self._shared.pause.clear()
        thread = threading.Thread(target=_produce, args=(self._iterator, self._shared), name=self._name, daemon=True)
        thread.start()
        return thread

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        shared = self._shared
        started = self._clock()
        if shared.standby in ("waiting", "go"):
            self._settle_standby()
        if self.inline:
            item = self._build_inline()
        else:
            try:
                item = shared.items.popleft()  # the common case: no lock
            except IndexError:
                item = self._wait_for_item()
            if shared.producer_waiting and len(shared.items) <= shared.low:
                with shared.cv:
                    shared.cv.notify_all()
        self.last_wait_seconds = self._clock() - started
        self.wait_seconds += self.last_wait_seconds
        if self.adaptive and not _is_final(item):
            self._adapt(started)
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.exc
        self.consumed += 1
        if self.consumed == 1 and self.inline and not self.switches:  # (inline: an adaptive Prefetcher)
            self._arm()
            self._returned_at = self._clock()  # starting the thread is not the consumer's time away
        return item

    def _arm(self) -> None:
        """After the first item: a producer thread that waits `standby_seconds` for the consumer's next call and
        reads ahead if it does not come (a training step), or ends unused if it does (a consumer that takes the
        items at once, which then builds them itself)."""
        self._shared.standby = "waiting"
        self._thread = self._start()

    def _settle_standby(self) -> None:
        """The consumer is back: cancel an armed producer that has not started reading ahead (and wait for it to
        end: it is only waiting), or take over its read-ahead."""
        shared = self._shared
        with shared.cv:
            went = shared.standby == "go"
            shared.standby = None if went else "cancelled"
            shared.cv.notify_all()
        if went:
            self.inline = False
            self.switches += 1
        else:
            self._thread.join()

    def _build_inline(self) -> Any:
        """The next item in the consumer's thread: what the paused producer left in the buffer first."""
        shared = self._shared
        if shared.items:
            return shared.items.popleft()
        _release_retired(shared)  # what the producer thread would free before its next item: the loader's work
        try:
            item = next(self._iterator)
        except StopIteration:
            _close_iterator(self._iterator, shared)
            return _END
        except BaseException as exc:  # noqa: BLE001 - raised to the consumer, like the producer's
            _close_iterator(self._iterator, shared)
            return _Failure(exc)
        shared.produced += 1
        return item

    def _adapt(self, started: float) -> None:
        """Count this item into the window (time away since the last item was returned, time in this `next()`);
        building inline, start the producer once the window shows a consumer that works between items; reading
        ahead, at the window's end pause it for one that does not (module doc)."""
        now = self._clock()
        window = self._window
        if self.inline and self._shared.items:  # still serving what the producer left: nothing built, not counted
            self._returned_at = now
            return
        if self._returned_at is not None:
            window[0] += 1
            window[1] += started - self._returned_at
            window[2] += now - started
        self._returned_at = now
        decision = adaptive_decision(
            self.inline, window[0], window[1], window[2], self._window_items, self.away_seconds
        )
        if decision is None:
            return
        self._window = [0, 0.0, 0.0]
        if decision == "thread":  # a consumer that works between items: read ahead now, not a window later
            self._resume()
            return
        self._window_items = max(2 * self.capacity, MIN_WINDOW)
        if decision == "inline":
            self._pause()
            self._returned_at = self._clock()  # joining the producer is not the consumer's time away

    def _pause(self) -> None:
        """Stop the producer before its next item (it finishes the one it is building) and build inline."""
        shared = self._shared
        shared.pause.set()
        with shared.cv:
            shared.cv.notify_all()
        self._thread.join()  # (had it ended meanwhile, its end or failure is the buffer's last item)
        self.inline = True
        self.switches += 1

    def _resume(self) -> None:
        """Read ahead on a new producer thread again, from where the consumer's inline building left off."""
        self.inline = False
        self.switches += 1
        self._thread = self._start()

    def retire(self, item: Any) -> None:
        """Hand back an item the consumer no longer references: the producer thread drops it, so freeing its
        memory (a batch: tensors, audit spans) does not happen inside the consumer's next step. The producer
        frees them before it builds each item (building inline, the consumer does, in the same place); after
        close() they are dropped here."""
        if self._done:
            return
        self._shared.retired.append(item)

    def _wait_for_item(self) -> Any:
        """The next item, once the buffer holds `wanted` items, or GATHER_SECONDS after the first arrived, or the
        producer ended (see the module doc); the first item of the stream as soon as it is there."""
        shared = self._shared
        items = shared.items
        wanted = 1 if self.consumed == 0 else max(1, self.capacity // 2)
        gather_until = None
        with shared.cv:
            while len(items) < wanted:
                if items and _is_final(items[-1]):
                    break
                # a producer that ended leaves a sentinel unless it was stopped (close, or collected)
                if shared.stop.is_set() or not self._thread.is_alive():
                    if items:
                        break
                    self._done = True
                    raise StopIteration
                timeout = _POLL_SECONDS
                if items:
                    now = time.perf_counter()
                    gather_until = gather_until or now + GATHER_SECONDS
                    if now >= gather_until:
                        break
                    timeout = gather_until - now
                shared.consumer_waiting, shared.wanted = True, wanted
                if shared.producer_waiting:
                    shared.cv.notify_all()
                shared.cv.wait(timeout)
            shared.consumer_waiting = False
            return items.popleft()

    @property
    def produced(self) -> int:
        """Items built so far: put into the buffer by the producer thread, or built inline (adaptive)."""
        return self._shared.produced

    @property
    def blocked_puts(self) -> int:
        """Puts that found the buffer full (backpressure events)."""
        return self._shared.blocked_puts

    @property
    def alive(self) -> bool:
        """Whether the producer thread is still running."""
        return self._thread is not None and self._thread.is_alive()

    def depth(self) -> int:
        """Items ready in the buffer now (approximate while the producer runs)."""
        return len(self._shared.items)

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> bool:
        """Stop the producer and drop what is buffered; True when the thread ended within `timeout` seconds.

        A producer blocked on a full buffer wakes within 50 ms; one stuck inside its source's `next()` cannot be
        interrupted and is left behind as a daemon thread (False), which ends at its next put.
        """
        self._shared.stop.set()
        self._done = True
        deadline = time.monotonic() + timeout
        while self._thread is not None:
            self._drain()
            self._thread.join(timeout=min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            if not self._thread.is_alive() or time.monotonic() >= deadline:
                break
        self._drain()
        if not self.alive and not self._shared.iterator_closed:  # paused or never started: built inline
            _close_iterator(self._iterator, self._shared)
        return not self.alive

    def _drain(self) -> None:
        """Drop buffered and retired items so their memory is freed now, not when the Prefetcher is collected;
        wakes a producer blocked on the full buffer so that it sees the stop."""
        shared = self._shared
        _release_retired(shared)
        with shared.cv:
            shared.items.clear()
            shared.cv.notify_all()

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        shared = getattr(self, "_shared", None)
        if shared is not None:  # a forgotten producer ends instead of blocking forever on a full buffer
            shared.stop.set()
