"""dedup/minhash_bands + dedup/minhash_signatures as plan -> task -> commit (no Dagster): the tables do not
depend on how the segment is sliced into tasks, on the batching, or on the order results are committed in."""

from __future__ import annotations

import math
import pickle
import uuid

import numpy as np
import pyarrow.parquet as pq
import pytest

from assets.dedup import signatures
from assets.dedup.minhash import MinHashParams, band_hashes, signature_from_bytes
from assets.dedup.signatures import SignatureParams
from iceberg_catalog import Provenance, config_hash
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import CURATED_DOCUMENTS, DEDUP_MINHASH_BANDS, DEDUP_MINHASH_SIGNATURES
from tests.dedup.documents import two_crawls, write_documents
from tests.dedup.reference import signature

PROV = Provenance("dedup/minhash_bands", None, "test", "test", config_hash({}))


def minhash(lakehouse, crawl: str, params: SignatureParams = SignatureParams(), reverse: bool = False):
    """Plan, run every task here, commit (the results reversed if asked); (tasks, results, commits)."""
    tasks = signatures.plan(lakehouse, crawl, "s", lakehouse.snapshot_id(CURATED_DOCUMENTS), params, uuid.uuid4().hex)
    results = [signatures.run_task(t) for t in tasks]
    commits = signatures.commit(
        lakehouse, crawl, "s", results[::-1] if reverse else results, {t: PROV for t in signatures.TABLES}
    )
    return tasks, results, commits


def digests(lakehouse) -> dict:
    return {t.identifier: table_digest(lakehouse, t) for t in signatures.TABLES}


def test_one_task_or_several_in_any_commit_order_give_the_same_tables(lakehouse):
    two_crawls(lakehouse, files=3)
    runs = {
        "one task per segment": (SignatureParams(files_per_slice=100), False),
        "one task per file": (SignatureParams(), False),
        "one task per file, small batches, committed in reverse": (SignatureParams(batch_docs=4), True),
        "one task per segment, two worker processes": (SignatureParams(files_per_slice=100, workers=2), False),
    }
    seen, tasks = {}, {}
    for name, (params, reverse) in runs.items():
        tasks[name] = [len(minhash(lakehouse, crawl, params, reverse)[0]) for crawl in ("CRAWL-A", "CRAWL-B")]
        seen[name] = digests(lakehouse)
    assert list(tasks.values()) == [[1, 1], [3, 3], [3, 3], [1, 1]]
    first = seen["one task per segment"]
    assert all(d == first for d in seen.values()), seen
    assert first["dedup.minhash_signatures"]["rows"] == 24 + 30  # kept documents with words
    assert first["dedup.minhash_bands"]["rows"] == 14 * (24 + 30)


def test_rows_are_the_signatures_and_band_hashes_of_the_kept_documents(lakehouse):
    texts = two_crawls(lakehouse)
    _, results, commits = minhash(lakehouse, "CRAWL-A")
    assert signatures.totals(results) == {"documents": 24, "documents_without_shingles": 1}
    assert commits[DEDUP_MINHASH_BANDS].rows == 14 * 24 and commits[DEDUP_MINHASH_SIGNATURES].rows == 24
    sigs = lakehouse.scan(DEDUP_MINHASH_SIGNATURES)
    docs = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "text"))
    text_of = dict(zip(docs["doc_id"].to_pylist(), docs["text"].to_pylist()))
    with_words = sorted(t for t in texts["CRAWL-A"] if t != "!!! ...")
    assert sorted(text_of[d] for d in sigs["doc_id"].to_pylist()) == with_words
    bands = lakehouse.scan(DEDUP_MINHASH_BANDS).to_pylist()
    stored = {}
    for r in bands:
        stored.setdefault(r["doc_id"], {})[r["band"]] = r["band_hash"]
    for d, blob in zip(sigs["doc_id"].to_pylist(), sigs["signature"].to_pylist()):
        sig = signature_from_bytes(blob, MinHashParams())
        assert np.array_equal(sig, signature(text_of[d]))
        assert [stored[d][b] for b in range(14)] == band_hashes(sig)
    assert {r["crawl"] for r in bands} == {"CRAWL-A"} and {r["segment"] for r in bands} == {"s"}


def test_bands_are_one_sorted_row_group_per_band_per_batch(lakehouse):
    two_crawls(lakehouse)
    tasks, results, _ = minhash(lakehouse, "CRAWL-B", SignatureParams(batch_docs=4))
    for task, result in zip(tasks, results):
        docs = sum(b.num_rows for b in lakehouse.read_slice(task.slice))
        (path,) = result.files[0].paths
        meta = pq.ParquetFile(lakehouse.file_io().new_input(path).open()).metadata
        assert meta.num_row_groups == 14 * math.ceil(docs / 4)
        table = pq.read_table(lakehouse.file_io().new_input(path).open())
        start = 0
        for g in range(meta.num_row_groups):
            n = meta.row_group(g).num_rows
            group = table.slice(start, n)
            start += n
            assert len(set(group["band"].to_pylist())) == 1
            keys = list(zip(group["band_hash"].to_pylist(), group["doc_id"].to_pylist()))
            assert keys == sorted(keys)


def test_a_segment_without_kept_documents_becomes_an_empty_partition(lakehouse):
    two_crawls(lakehouse)
    minhash(lakehouse, "CRAWL-A")
    minhash(lakehouse, "CRAWL-B")
    write_documents(lakehouse, "CRAWL-A", "s", [("d" * 32, "some words that were dropped", False)], files=1)
    tasks, _, commits = minhash(lakehouse, "CRAWL-A")
    assert tasks == [] and commits[DEDUP_MINHASH_BANDS].rows == 0
    assert commits[DEDUP_MINHASH_BANDS].snapshot_id is not None  # the materialisation is on record
    assert set(lakehouse.scan(DEDUP_MINHASH_BANDS, ("crawl",))["crawl"].to_pylist()) == {"CRAWL-B"}
    assert signatures.plan(lakehouse, "CRAWL-A", "s", None, SignatureParams(), "r") == []  # never written


def test_tasks_pickle_and_rerun_to_the_same_rows(lakehouse):
    two_crawls(lakehouse)
    (task, *_), _, _ = minhash(lakehouse, "CRAWL-A")
    again = pickle.loads(pickle.dumps(task))
    again = type(task)(
        **{
            **again.__dict__,
            "bands_out": lakehouse.output(DEDUP_MINHASH_BANDS, {"crawl": "CRAWL-A", "segment": "s"}, "rerun", 0),
            "signatures_out": lakehouse.output(
                DEDUP_MINHASH_SIGNATURES, {"crawl": "CRAWL-A", "segment": "s"}, "rerun", 0
            ),
        }
    )
    result = signatures.run_task(again)
    assert result.files[0].rows == 14 * result.stats["documents"] and result.stats["documents"] > 0


def test_params():
    p = SignatureParams()
    assert (p.n_grams, p.bands, p.rows, p.seed, p.batch_docs, p.workers, p.files_per_slice) == (5, 14, 8, 1, 2000, 1, 1)
    assert p.minhash == MinHashParams() and type(p.minhash) is MinHashParams
    # only the MinHash settings change what is stored
    assert SignatureParams(batch_docs=7, workers=3, files_per_slice=2).hashed() == {
        "n_grams": 5,
        "bands": 14,
        "rows": 8,
        "seed": 1,
    }
    for bad in ({"batch_docs": 0}, {"workers": 0}, {"files_per_slice": 0}, {"bands": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SignatureParams(**bad)
