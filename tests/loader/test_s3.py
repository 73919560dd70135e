"""The loader on object storage: a real SeaweedFS S3 server on loopback, row groups fetched with ranged reads
through the node-local cache, read ahead in the loader's own order; the same batches as the local files; a
corrupt cached copy re-fetched and counted; a corrupt object an error naming run view, object and document;
dropped connections retried with backoff and counted; the cache kept under its byte budget."""

from __future__ import annotations

import pytest

import loader
from loader.storage import StorageConfig, StorageError
from tests.cluster.servers import seaweedfs  # noqa: F401 - the session fixture
from tests.loader import views
from tests.loader.proxy import ThrottlingProxy
from tests.loader.s3views import upload_bundle
from tests.loader.views import GLOBAL_BATCH, run, same_batch

pytestmark = pytest.mark.slow
STEPS = 7  # one epoch of the shared view


@pytest.fixture(scope="module")
def reference():
    return run(loader.RunViewLoader(loader.open_run_view(bundle=views.bundle()), GLOBAL_BATCH, prefetch=0), STEPS)


def s3_loader(bundle, props, cache=None, budget=1 << 30, **kw):
    storage = StorageConfig(cache_dir=str(cache) if cache else None, cache_bytes=budget, backoff_base_s=0.01, **kw)
    view = loader.open_run_view(bundle=bundle, io_properties=props, storage=storage)
    return loader.RunViewLoader(view, GLOBAL_BATCH)


def test_s3_through_the_cache_serves_the_local_batches_cold_and_warm(seaweedfs, tmp_path, reference):  # noqa: F811
    bundle, props = upload_bundle(seaweedfs, tmp_path)
    cold = s3_loader(bundle, props, tmp_path / "cache")
    got = run(cold, STEPS)
    assert all(same_batch(x, y) for x, y in zip(got, reference, strict=True))
    m = cold.metrics()
    assert m["fetches"] > 0 and m["fetch_bytes"] > 0 and m["cache_bytes"] > 0
    assert m["fetch_latency_p50"] is not None and m["fetch_latency_p99"] >= m["fetch_latency_p50"]
    assert m["tokens_per_s"] > 0 and m["retries"] == 0 and m["corrupt_refetched"] == 0
    warm = s3_loader(bundle, props, tmp_path / "cache")  # a new reader: only the node cache is shared
    assert all(same_batch(x, y) for x, y in zip(run(warm, STEPS), reference, strict=True))
    w = warm.metrics()
    assert w["cache_hit_rate"] == 1.0 and w["fetches"] == 0, w


def test_s3_with_dataloader_workers(seaweedfs, tmp_path, reference):  # noqa: F811
    bundle, props = upload_bundle(seaweedfs, tmp_path)
    data = s3_loader(bundle, props, tmp_path / "cache")
    data.num_workers, data.multiprocessing_context = 2, "fork"
    assert all(same_batch(x, y) for x, y in zip(run(data, STEPS), reference, strict=True))
    m = data.metrics()
    assert m["cache_misses"] > 0 and m["fetch_latency_p95"] is not None  # reported by the workers


def test_a_corrupt_cached_file_is_refetched_and_counted(seaweedfs, tmp_path, reference):  # noqa: F811
    bundle, props = upload_bundle(seaweedfs, tmp_path)
    cache = tmp_path / "cache"
    run(s3_loader(bundle, props, cache), STEPS)
    files = sorted(cache.glob("*/*.rg"))
    assert files
    for f in files[:2]:
        raw = bytearray(f.read_bytes())
        raw[len(raw) // 2] ^= 0xFF  # flipped bits in the middle of the cached column chunks
        f.write_bytes(bytes(raw))
    files[2].write_bytes(files[2].read_bytes()[:20])  # a torn file
    again = s3_loader(bundle, props, cache)
    assert all(same_batch(x, y) for x, y in zip(run(again, STEPS), reference, strict=True))
    m = again.metrics()
    assert m["corrupt_refetched"] == 3 and m["cache_misses"] == 3, m  # none served, each fetched again


def test_a_corrupt_object_names_run_view_object_and_document(seaweedfs, tmp_path):  # noqa: F811
    bundle, props = upload_bundle(seaweedfs, tmp_path, corrupt_doc_row=3)
    cache = tmp_path / "cache"
    data = s3_loader(bundle, props, cache)
    victim = None
    with pytest.raises(loader.ChecksumMismatch) as e:
        run(data, STEPS)
    msg = str(e.value)
    victim = e.value.doc_id
    assert data.plan.view.run_view_id in msg and "s3://" in msg and "tokens-000.parquet" in msg and victim in msg
    assert victim in data.plan.view.doc_ids


def test_dropped_connections_are_retried_with_backoff(seaweedfs, tmp_path, reference):  # noqa: F811
    port = int(seaweedfs.s3_endpoint.rsplit(":", 1)[1])
    with ThrottlingProxy(port, drop_first=2) as proxy:
        bundle, props = upload_bundle(seaweedfs, tmp_path, endpoint=proxy.endpoint)
        data = s3_loader(bundle, props)
        assert all(same_batch(x, y) for x, y in zip(run(data, STEPS), reference, strict=True))
        assert proxy.dropped == 2 and data.metrics()["retries"] >= 1
    with ThrottlingProxy(port, drop_first=10**6) as down:
        bundle, props = upload_bundle(seaweedfs, tmp_path, endpoint=down.endpoint)
        data = s3_loader(bundle, props, max_attempts=3)
        with pytest.raises(StorageError, match=r"tokens-000\.parquet.*3 attempts"):
            run(data, STEPS)


def test_the_cache_stays_under_its_byte_budget(seaweedfs, tmp_path, reference):  # noqa: F811
    bundle, props = upload_bundle(seaweedfs, tmp_path)
    budget = 12_000  # a few row groups of the shared view
    data = s3_loader(bundle, props, tmp_path / "cache", budget=budget)
    assert all(same_batch(x, y) for x, y in zip(run(data, STEPS), reference, strict=True))
    m = data.metrics()
    # read-ahead: half the cache budget, plus at most the reads in flight when it was reached
    assert 0 < m["cache_bytes"] <= budget and 0 < m["peak_readahead_bytes"] <= budget, m
