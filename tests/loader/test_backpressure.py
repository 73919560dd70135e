"""Backpressure and metrics: a stalled consumer keeps the loader's read-ahead (and RSS) bounded, shutdown with a
full queue is quick, and tokens/s, data-wait and read latency are reported from bounded memory."""

from __future__ import annotations

import functools
import gc
import random
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from loader import RunViewLoader, in_memory_view, open_run_view
from loader.metrics import LoaderMetrics, percentile
from loader.prefetch import CLOSE_TIMEOUT_SECONDS
from tests.loader import views
from tests.loader.clock import Clock

MiB = 1 << 20


def rss_bytes() -> int:
    """This process's resident set now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "tokenlake-prefetch" and t.is_alive()]


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"condition not reached within {timeout} s"
        time.sleep(0.01)


def counting_batches(data: RunViewLoader) -> list[int]:
    """Record every global step the loader's reader builds (instrumentation of the real reader, not a stand-in)."""
    built: list[int] = []
    reader = data.dataset.reader
    build = reader.batch

    def batch(step, rank=0, world_size=1):
        built.append(step)
        return build(step, rank, world_size)

    reader.batch = batch
    return built


def read_ahead_from_now(data: RunViewLoader, batches, step_s: float = 0.02) -> int:
    """Take batches like a training loop (a `step_s` step before each) until the loader reads ahead on its thread
    (an adaptive read-ahead starts inline and starts its thread for a loop that works between batches); returns
    the steps consumed by then."""
    for _ in range(10):
        if data.metrics()["readahead"] == "thread":
            return data.global_step
        time.sleep(step_s)
        next(batches)
    pytest.fail(f"the read-ahead thread did not start: {data.metrics()['readahead']}")


@pytest.mark.parametrize("capacity", [1, 4])
def test_stalled_consumer_bounds_read_ahead_and_rss(capacity):
    # 8 sequences x 32,768 tokens: ~10 MiB of tensors per batch, so unbounded read-ahead would show in RSS at once
    view = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    data = RunViewLoader(view, 8, seq_len=32768, prefetch=capacity)
    built = counting_batches(data)
    before = set(prefetch_threads())  # other tests' threads, if any are still winding down
    batches = iter(data)
    first = next(batches)
    batch_bytes = sum(v.nbytes for v in first.values() if hasattr(v, "nbytes"))
    assert batch_bytes > 9 * MiB
    k = read_ahead_from_now(data, batches)
    # the consumer now stalls: the thread fills the queue, builds one more and blocks on the put
    wait_until(lambda: len(built) == k + capacity + 1)
    rss_at_stall = rss_bytes()
    time.sleep(1.0)  # ~7 ms per batch here: an unbounded producer would build >100 batches (>1 GiB) meanwhile
    assert built == list(range(k + capacity + 1))
    assert rss_bytes() - rss_at_stall < 2 * batch_bytes  # flat while stalled
    resumed = next(batches)  # the consumer resumes where it left off
    assert resumed["step"] == k and data.global_step == k + 1
    wait_until(lambda: len(built) == k + 1 + capacity + 1)

    # shutdown with a full queue: closing the iterator stops and joins the prefetch thread within the bound
    (ours,) = set(prefetch_threads()) - before
    started = time.monotonic()
    batches.close()
    assert time.monotonic() - started < CLOSE_TIMEOUT_SECONDS
    assert not ours.is_alive()
    assert data.state_dict()["global_step"] == k + 1  # prefetched-but-unconsumed batches are not in the cursor


def test_rss_bound_of_a_stalled_loader():
    """RSS while stalled stays within (capacity + 3) batches of the RSS before the first batch."""
    view = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    capacity = 3
    data = RunViewLoader(view, 8, seq_len=32768, prefetch=capacity)
    built = counting_batches(data)
    batches = iter(data)
    base = rss_bytes()
    first = next(batches)
    batch_bytes = sum(v.nbytes for v in first.values() if hasattr(v, "nbytes"))
    del first
    k = read_ahead_from_now(data, batches)
    wait_until(lambda: len(built) == k + capacity + 1)
    time.sleep(0.5)
    grown = rss_bytes() - base
    batches.close()
    # live: the last two batches handed out (the loop's, and the one before it, held until the next goes out to
    # be freed on the read-ahead thread), `capacity` queued, one blocked in the put; 32 MiB of allocator slack
    assert grown <= (capacity + 3) * batch_bytes + 32 * MiB, (grown / MiB, batch_bytes / MiB)


# ---- metrics ------------------------------------------------------------------------------------------------


class FakeClock:
    """A clock the test advances by hand, so rates are exact."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_tokens_per_second_and_wait_fraction_are_exact_on_a_known_timeline():
    clock = FakeClock()
    m = LoaderMetrics(clock=clock)
    m.start()
    for _ in range(10):  # each step: wait 0.1 s for data, then 0.3 s of compute
        clock.now += 0.1
        m.record_batch(4096, 0.1)
        clock.now += 0.3
    clock.now -= 0.3  # summary covers start .. last batch
    s = m.summary()
    assert s["batches"] == 10 and s["tokens"] == 40960
    assert s["elapsed_seconds"] == pytest.approx(3.7)
    assert s["tokens_per_second"] == pytest.approx(40960 / 3.7)
    assert s["data_wait_fraction"] == pytest.approx(1.0 / 3.7)
    assert s["read_latency_p50"] is None  # no reads recorded


def test_empty_metrics_report_none_rates():
    s = LoaderMetrics().summary()
    assert s["tokens_per_second"] is None and s["data_wait_fraction"] is None and s["batches"] == 0


def test_read_latency_percentiles_match_numpy_while_under_the_reservoir():
    rng = random.Random(3)
    values = [rng.expovariate(50) for _ in range(1000)]
    m = LoaderMetrics(reservoir_size=4096)
    for v in values:
        m.record_read(v)
    s = m.summary()
    for q in (50, 95, 99):
        assert s[f"read_latency_p{q}"] == pytest.approx(float(np.percentile(values, q)))
    assert s["reads"] == 1000 and s["read_seconds"] == pytest.approx(sum(values))


def test_reservoir_keeps_memory_bounded_and_percentiles_close():
    m = LoaderMetrics(reservoir_size=2048, seed=1)
    n = 200_000
    for i in range(n):
        m.record_read((i * 7919 % n) / n)  # a permutation of 0..1: p50 = 0.5, p95 = 0.95, p99 = 0.99
    assert len(m._reservoir) == 2048
    s = m.summary()
    assert s["reads"] == n
    assert s["read_latency_p50"] == pytest.approx(0.50, abs=0.04)
    assert s["read_latency_p95"] == pytest.approx(0.95, abs=0.02)
    assert s["read_latency_p99"] == pytest.approx(0.99, abs=0.01)


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_metrics_reject_bad_values(bad):
    m = LoaderMetrics()
    with pytest.raises(ValueError, match="seconds"):
        m.record_read(bad)
    with pytest.raises(ValueError, match="wait_seconds"):
        m.record_batch(1, bad)
    with pytest.raises(ValueError, match="n_tokens"):
        m.record_batch(-1, 0.0)
    with pytest.raises(ValueError, match="reservoir_size"):
        LoaderMetrics(reservoir_size=0)
    with pytest.raises(ValueError, match="percentile q"):
        percentile([1.0], 101)


class SlowSource:
    """A token source that takes `delay` seconds per read: a slow disk or object store."""

    def __init__(self, inner, delay: float) -> None:
        self.inner, self.delay = inner, delay

    def read(self, sample_indices):
        time.sleep(self.delay)
        return self.inner.read(sample_indices)


def run_metered(source_delay: float, step_seconds: float, steps: int = 25) -> dict:
    """Iterate an in-memory view of real GPT-2 tokens with prefetch 2; the training step sleeps `step_seconds`."""
    view = in_memory_view(views.gpt2_docs(), seq_len=64, eos_id=50256)
    if source_delay:
        view.source = SlowSource(view.source, source_delay)
    metrics = LoaderMetrics()
    data = RunViewLoader(view, 4, prefetch=2, max_steps=steps, metrics=metrics)
    metrics.start()
    for _ in data:
        time.sleep(step_seconds)
    return metrics.summary()


def test_data_wait_is_high_for_a_slow_source_and_low_for_a_fast_one():
    slow = run_metered(source_delay=0.03, step_seconds=0.0)
    fast = run_metered(source_delay=0.0, step_seconds=0.03)
    assert slow["data_wait_fraction"] > 0.5, slow
    assert fast["data_wait_fraction"] < 0.2, fast
    assert slow["tokens"] == fast["tokens"] == 25 * 4 * 64
    assert fast["tokens_per_second"] > 0


def test_row_group_reads_are_timed_on_a_catalog_view():
    view = open_run_view(views.lakehouse()["a"], catalog=views.catalog())
    metrics = LoaderMetrics()
    data = RunViewLoader(view, views.GLOBAL_BATCH, max_steps=7, metrics=metrics)
    for _ in data:
        pass
    s = metrics.summary()
    assert s["reads"] >= 1 and 0 < s["read_latency_p50"] <= s["read_latency_p95"] <= s["read_latency_p99"]
    assert s["batches"] == 7 and s["tokens"] == 7 * views.GLOBAL_BATCH * views.SEQ_LEN


def test_the_training_loop_does_not_free_its_consumed_batches(monkeypatch):
    """A consumed batch (tensors, audit spans) is freed on the read-ahead thread, not inside the loop's next():
    that cost ~60 us right after every step on a 2-core VM (data-wait). Batches and order are unchanged. The
    read-ahead's clock is the test's and its armed producer does not wait, so the thread runs from the second
    batch whatever the machine's load (loader.prefetch; the real timings: bench/prefetch.py)."""
    from loader import prefetch

    clock = Clock()
    monkeypatch.setattr(prefetch, "Prefetcher", functools.partial(prefetch.Prefetcher, standby_seconds=0, clock=clock))
    view = in_memory_view(views.gpt2_docs(), seq_len=64, eos_id=50256)
    freed_on: list[str] = []
    data = RunViewLoader(view, 4, prefetch=4, max_steps=30)
    steps = []
    for batch in data:
        weakref.finalize(batch["input_ids"], lambda: freed_on.append(threading.current_thread().name))
        steps.append(batch["step"])
        if len(steps) == 1:  # the first training step lasts until the armed producer has started reading ahead
            wait_until(lambda: data.prefetcher._shared.standby == "go")
        clock.step(0.02)  # a 20 ms training step on the read-ahead's clock
        assert data.metrics()["readahead"] == ("thread" if len(steps) >= 2 else "inline")  # (loader.prefetch)
    del batch
    assert steps == list(range(30))
    wait_until(lambda: len(freed_on) == 30)
    # freed while the read-ahead thread runs: all on it; the last few (retired after it ended, or still held
    # when the loop ends) on the loop's thread
    assert set(freed_on[1:20]) == {"tokenlake-prefetch"}, freed_on
    plain = [b["input_ids"] for b in RunViewLoader(view, 4, prefetch=0, max_steps=30)]
    again = [b["input_ids"] for b in RunViewLoader(view, 4, prefetch=4, max_steps=30)]
    assert all(torch.equal(a, b) for a, b in zip(plain, again, strict=True))


@pytest.mark.parametrize("prefetch, step_s", [(0, 0.0), (None, 0.0), (None, 0.005)])
def test_the_loader_leaves_no_cyclic_garbage_per_batch(prefetch, step_s):
    """Batches are freed by reference counting, whatever the read-ahead does (none, built inline, the thread for a
    loop that works between batches): a loader run for 40 steps leaves the garbage collector as much to do as one
    run for 5 (what opening a loader leaves), so a long training run adds nothing to the collections it pays for."""
    view = open_run_view(views.lakehouse()["a"], catalog=views.catalog())

    def cyclic_garbage(steps: int) -> int:
        gc.collect()
        gc.disable()  # nothing collected behind the count's back
        try:
            data = RunViewLoader(view, views.GLOBAL_BATCH, **({} if prefetch is None else {"prefetch": prefetch}))
            it = iter(data)
            for _ in range(steps):
                next(it)
                time.sleep(step_s)
            it.close()
            del it, data
            return gc.collect()
        finally:
            gc.enable()

    cyclic_garbage(5)  # first use: lazy imports and caches
    assert cyclic_garbage(40) == cyclic_garbage(5)
