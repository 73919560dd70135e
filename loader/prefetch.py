"""Bounded prefetch: one daemon thread reads ahead of the consumer into a queue of at most `capacity` items.

The queue is the only buffer, so a stalled consumer holds at most `capacity` items (plus the one the producer
is building) in memory: the producer blocks on a full queue. The producer's puts are timed so that `close()`
can stop it within a bound even while the queue is full; a producer exception reaches the consumer.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

_END = object()  # the producer's iterator is exhausted
_POLL_SECONDS = 0.05  # how often a blocked put / get looks at the stop event
CLOSE_TIMEOUT_SECONDS = 5.0


class _Failure:
    """An exception raised by the producer, carried through the queue to the consumer."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Shared:
    """What the producer thread and the consumer share; the thread holds this, never the Prefetcher, so a
    forgotten Prefetcher is collected and its __del__ stops the thread."""

    __slots__ = ("queue", "stop", "produced", "blocked_puts")

    def __init__(self, capacity: int) -> None:
        self.queue: queue.Queue = queue.Queue(maxsize=capacity)
        self.stop = threading.Event()
        self.produced = 0
        self.blocked_puts = 0


def _put(shared: _Shared, item: Any) -> bool:
    """Put `item`, blocking while the queue is full; False when stopped before it fitted."""
    try:
        shared.queue.put_nowait(item)
        return True
    except queue.Full:
        shared.blocked_puts += 1
    while not shared.stop.is_set():
        try:
            shared.queue.put(item, timeout=_POLL_SECONDS)
            return True
        except queue.Full:
            continue
    return False


def _produce(iterator: Iterator[Any], shared: _Shared) -> None:
    """The producer thread: every item of `iterator`, then _END, or a _Failure with what it raised."""
    try:
        for item in iterator:
            if shared.stop.is_set() or not _put(shared, item):
                return
            shared.produced += 1
        _put(shared, _END)
    except BaseException as exc:  # noqa: BLE001 - everything the producer raises belongs to the consumer
        _put(shared, _Failure(exc))
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:  # a generator's finally blocks (open files) run on the thread that ran it
            try:
                close()
            except Exception:  # noqa: BLE001 - shutdown of a source that already failed or ended
                pass


class Prefetcher:
    """Iterate `iterable` on a daemon thread, at most `capacity` items ahead of the consumer."""

    def __init__(self, iterable: Iterable[Any], capacity: int, *, name: str = "tokenlake-prefetch") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"Prefetcher capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self._shared = _Shared(capacity)
        self._done = False  # the consumer has seen the end or an error, or closed
        self.consumed = 0
        self.wait_seconds = 0.0  # total time the consumer spent blocked in __next__
        self.last_wait_seconds = 0.0
        self._thread = threading.Thread(target=_produce, args=(iter(iterable), self._shared), name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        shared = self._shared
        started = time.perf_counter()
        while True:
            try:
                item = shared.queue.get(timeout=_POLL_SECONDS)
                break
            except queue.Empty:
                # a producer that ended leaves a sentinel unless it was stopped (close, or collected)
                if shared.stop.is_set() or (not self._thread.is_alive() and shared.queue.empty()):
                    self._done = True
                    raise StopIteration from None
        self.last_wait_seconds = time.perf_counter() - started
        self.wait_seconds += self.last_wait_seconds
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._done = True
            raise item.exc
        self.consumed += 1
        return item

    @property
    def produced(self) -> int:
        """Items the producer has put into the queue so far."""
        return self._shared.produced

    @property
    def blocked_puts(self) -> int:
        """Puts that found the queue full (backpressure events)."""
        return self._shared.blocked_puts

    @property
    def alive(self) -> bool:
        """Whether the producer thread is still running."""
        return self._thread.is_alive()

    def depth(self) -> int:
        """Items ready in the queue now (approximate while the producer runs)."""
        return self._shared.queue.qsize()

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> bool:
        """Stop the producer and drop what is queued; True when the thread ended within `timeout` seconds.

        A producer blocked on a full queue wakes within 50 ms; one stuck inside its source's `next()` cannot be
        interrupted and is left behind as a daemon thread (False), which ends at its next put.
        """
        self._shared.stop.set()
        self._done = True
        deadline = time.monotonic() + timeout
        while True:
            self._drain()
            self._thread.join(timeout=min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
            if not self._thread.is_alive() or time.monotonic() >= deadline:
                break
        self._drain()
        return not self._thread.is_alive()

    def _drain(self) -> None:
        """Drop queued items so their memory is freed now, not when the Prefetcher is collected."""
        while True:
            try:
                self._shared.queue.get_nowait()
            except queue.Empty:
                return

    def __enter__(self) -> Prefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        shared = getattr(self, "_shared", None)
        if shared is not None:  # a forgotten producer ends instead of blocking forever on a full queue
            shared.stop.set()
