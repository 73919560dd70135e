"""Start-up once per worker: the curation pool (`pipeline.curate_records` with `workers` > 1) is started once per
process and kept across partitions, gives the rows of one process, and a pool whose worker died is replaced.

Real pages from the repo's sample crawl (`test_extract.real_pages`)."""

from __future__ import annotations

import hashlib
import os
import signal
from concurrent.futures.process import BrokenProcessPool

import pytest

from assets.curated import pipeline
from assets.curated.pipeline import CurateParams, close_curation_workers, curate_records
from tests.curated.test_extract import real_pages  # noqa: F401 - a fixture

IGNORED = ("extract_seconds",)  # wall-clock measurements: the only columns allowed to differ
SEGMENTER_MODULES = {"zh": "jieba", "ja": "sudachipy", "ko": "kiwipiepy", "th": "pythainlp"}


def records(pages) -> list[dict]:
    """The sample pages as raw.warc_records rows (the columns the funnel reads)."""
    out = []
    for i, (payload, content_type, url) in enumerate(pages):
        rid = f"<urn:test:{i}>"
        out.append(
            {
                "record_id": rid,
                "deletion_key": rid,
                "crawl": "CC-MAIN-2020-34",
                "segment": "1596439738015.38",
                "target_uri": url,
                "host": None,
                "warc_date": None,
                "http_status": 200,
                "content_type": content_type,
                "payload": payload,
                "payload_sha1": hashlib.sha1(payload).hexdigest(),
            }
        )
    return out


def curate(recs: list[dict], params: CurateParams, lm: str, chunk: int = 3) -> list[dict]:
    chunks = [recs[i : i + chunk] for i in range(0, len(recs), chunk)]
    rows = [row for rows in curate_records(chunks, params, lm) for row in rows]
    return [{k: v for k, v in r.items() if k not in IGNORED} for r in rows]


def loaded_segmenters() -> list[str]:
    """In a pool worker: the word segmenters it has imported."""
    import sys

    return [m for m in SEGMENTER_MODULES.values() if m in sys.modules]


@pytest.fixture
def no_pools():
    close_curation_workers()
    yield
    close_curation_workers()


def test_the_pool_outlives_partitions_and_a_broken_one_is_replaced(
    no_pools,
    real_pages,  # noqa: F811
    reference_lm_file,
    tokenlake_home,
):
    recs = records(real_pages)
    two = CurateParams(workers=2)
    expected = curate(recs, CurateParams(), reference_lm_file)
    assert curate(recs, two, reference_lm_file) == expected  # whatever the worker count, the same rows
    pool = pipeline._POOLS[2]
    pids = set(pool._processes)
    # the next partitions (other parameters too) run in the same processes: no start-up paid again
    assert curate(recs[:4], two, reference_lm_file, chunk=1) == expected[:4]
    lax = CurateParams(workers=2, language_threshold=0.0)
    assert [r["decision"] for r in curate(recs[:4], lax, reference_lm_file)] == [
        r["decision"] for r in curate(recs[:4], CurateParams(language_threshold=0.0), reference_lm_file)
    ]
    assert pipeline._POOLS[2] is pool and set(pool._processes) == pids
    # a worker loads a language's segmenter only for a page in that language (the others are never imported)
    languages = {r["language"] for r in expected if r["quality_rules"]}
    needed = {module for lang, module in SEGMENTER_MODULES.items() if lang in languages}
    assert set(pool.submit(loaded_segmenters).result()) <= needed
    # a worker killed mid-run fails that partition; the next one gets a fresh pool and the same rows
    os.kill(next(iter(pids)), signal.SIGKILL)
    with pytest.raises(BrokenProcessPool):
        curate(recs, two, reference_lm_file)
    assert curate(recs, two, reference_lm_file) == expected
    assert pipeline._POOLS[2] is not pool
    close_curation_workers()
    assert not pipeline._POOLS


def test_an_early_stop_leaves_no_work_queued(no_pools, real_pages, reference_lm_file, tokenlake_home):  # noqa: F811
    """A consumer that stops after the first chunk (a failed task) leaves at most its look-ahead (2 chunks per
    worker) behind, never the rest of the partition: the next partition waits for little. What the pool has
    already handed to its call queue is marked running and cannot be cancelled, so the bound is the look-ahead."""
    recs = records(real_pages)
    params = CurateParams(workers=2)
    # a quick first chunk, then many that take a while, so that unbounded submission would still be queued
    chunks = [recs[:1]] + [recs * 6] * 10
    rows = curate_records(chunks, params, reference_lm_file)
    assert len(next(rows)) == 1
    rows.close()
    pool = pipeline._POOLS[params.workers]
    assert sum(not w.future.done() for w in pool._pending_work_items.values()) <= 2 * params.workers
    assert len(curate(recs, params, reference_lm_file)) == len(recs)  # and the pool serves the next partition
