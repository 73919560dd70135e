"""The node-local cache on local token files (`cache_local`, no server: the fast suite's copy of the S3 tests):
a corrupt or torn cached copy is re-fetched and counted, never served; the budget evicts least recently used;
jittered backoff stays within its bounds."""

from __future__ import annotations

import random

import loader
from loader.storage import NodeCache, StorageConfig, backoff_seconds
from tests.loader import views
from tests.loader.views import GLOBAL_BATCH, run, same_batch


def cached_loader(cache, budget=1 << 30):
    storage = StorageConfig(cache_dir=str(cache), cache_bytes=budget, cache_local=True)
    return loader.RunViewLoader(loader.open_run_view(bundle=views.bundle(), storage=storage), GLOBAL_BATCH)


def test_corrupt_cached_row_groups_are_refetched_and_counted(tmp_path):
    ref = run(loader.RunViewLoader(views.view(), GLOBAL_BATCH), 7)
    first = cached_loader(tmp_path)
    assert all(same_batch(x, y) for x, y in zip(run(first, 7), ref, strict=True))
    files = sorted(tmp_path.glob("*/*.rg"))
    m = first.metrics()  # the read-ahead filled some of them first: the loader found those cached
    assert len(files) >= 3 and m["cache_misses"] + m["cache_hits"] == len(files) and m["cache_misses"] >= 1
    raw = bytearray(files[0].read_bytes())
    raw[-10] ^= 0x55  # flipped bits near the end of the column chunks
    files[0].write_bytes(bytes(raw))
    files[1].write_bytes(files[1].read_bytes()[: len(raw) // 3])  # torn
    files[2].write_bytes(b"not a cache file")  # no header at all: absent
    again = cached_loader(tmp_path)
    assert all(same_batch(x, y) for x, y in zip(run(again, 7), ref, strict=True))
    m = again.metrics()
    assert m["corrupt_refetched"] == 2 and m["cache_misses"] == 3 and m["cache_hits"] == len(files) - 3, m


def test_the_cache_evicts_least_recently_used_to_stay_under_budget(tmp_path):
    cache = NodeCache(tmp_path, budget_bytes=3 * 1013)
    for i in range(3):
        cache.put("s3://b/o", i, 0, bytes(1000))
    assert cache.get("s3://b/o", 0) is not None  # 0 is now the most recently used
    import os
    import time

    old = time.time() - 100
    os.utime(cache.path("s3://b/o", 1), (old, old))
    cache.put("s3://b/o", 3, 0, bytes(1000))
    assert cache.bytes_used() <= 3 * 1013
    assert cache.get("s3://b/o", 1) is None and cache.get("s3://b/o", 3) is not None


def test_backoff_is_jittered_and_capped():
    rng = random.Random(0)
    waits = [backoff_seconds(a, 0.05, 1.0, rng) for a in range(1, 12) for _ in range(20)]
    assert all(0 <= w <= 1.0 for w in waits) and len(set(waits)) > 100
    assert max(backoff_seconds(1, 0.05, 1.0, rng) for _ in range(200)) <= 0.1


def test_a_warm_cache_reads_nothing_from_the_store_and_a_bad_cached_footer_is_read_again(tmp_path):
    ref = run(loader.RunViewLoader(views.view(), GLOBAL_BATCH), 7)
    run(cached_loader(tmp_path), 7)  # fills the cache: row groups and each object's footer
    footers = sorted(tmp_path.glob("*/*.ft"))
    assert footers
    warm = cached_loader(tmp_path)
    assert all(same_batch(x, y) for x, y in zip(run(warm, 7), ref, strict=True))
    m = warm.metrics()
    assert m["fetches"] == 0 and m["footer_reads"] == 0 and m["cache_hit_rate"] == 1.0, m
    raw = bytearray(footers[0].read_bytes())
    raw[-5] ^= 0x01  # no longer matches the digest stored with it
    footers[0].write_bytes(bytes(raw))
    again = cached_loader(tmp_path)
    assert all(same_batch(x, y) for x, y in zip(run(again, 7), ref, strict=True))
    assert again.metrics()["footer_reads"] == 1
