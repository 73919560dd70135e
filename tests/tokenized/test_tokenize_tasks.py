"""tokenized/documents as plan -> task -> commit on a real lakehouse: the rows do not depend on how the plan is
cut, on the order tasks finish in, or on the encode batching; the check names a corrupted row."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from assets.tokenized import tokenize
from assets.tokenized.tokenize import TokenizeParams, TokenizerRef
from assets.tokenized.tokens import decode_document, load_tokenizer, tokenizer_row, tokens_from_bytes
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import TOKENIZED_DOCUMENTS, TOKENIZED_TOKENIZERS
from resources import DEFAULT_TOKENIZERS
from tests.quarantine.injection import real_documents
from tests.tokenized.partitions import PROVENANCE, curated_rows, write_curated, write_partition

CRAWL, SEGMENT = "TEST-CRAWL", "seg-1"
FILES = 5
NOT_KEPT, EXACT, NEAR, CANONICAL = (2, 9, 30), ("d004", "d017"), ("d021",), ("d022",)


@pytest.fixture
def upstream(lakehouse):
    texts = real_documents()[:48]
    rows = curated_rows(texts, CRAWL, SEGMENT, NOT_KEPT)
    write_curated(lakehouse, rows, FILES, exact=EXACT, near=NEAR, canonical=CANONICAL)
    gpt2 = load_tokenizer(DEFAULT_TOKENIZERS["gpt2"], "gpt2")
    writer = lakehouse.writer(TOKENIZED_TOKENIZERS, {"tokenizer_id": gpt2.info.tokenizer_id})
    writer.write(tokenizer_row(gpt2))
    writer.commit(PROVENANCE)
    return lakehouse, rows, gpt2


def tokenize_partition(lakehouse, gpt2, params: TokenizeParams, reverse: bool = False):
    """Plan, run every task, commit (results reversed when asked); (tasks, totals)."""
    ref = TokenizerRef("gpt2", DEFAULT_TOKENIZERS["gpt2"], gpt2.info.tokenizer_id)
    pins = lakehouse.snapshot_ids(tokenize.UPSTREAM)
    tasks = tokenize.plan(lakehouse, ref, CRAWL, SEGMENT, pins, params, uuid.uuid4().hex)
    results = [tokenize.run_task(t) for t in tasks]
    tokenize.commit(
        lakehouse, gpt2.info.tokenizer_id, CRAWL, SEGMENT, results[::-1] if reverse else results, PROVENANCE
    )
    return len(tasks), tokenize.totals(results)


def test_one_task_or_several_give_the_same_rows_in_curated_order(upstream):
    lakehouse, rows, gpt2 = upstream
    n, totals = tokenize_partition(lakehouse, gpt2, TokenizeParams(files_per_slice=FILES))
    one = table_digest(lakehouse, TOKENIZED_DOCUMENTS)
    expected = [r for r in rows if r["kept"] and r["doc_id"] not in EXACT + NEAR]
    assert n == 1 and one["rows"] == totals["documents"] == len(expected) == 48 - 3 - 3
    assert totals["excluded"] == 3  # the canonical document of a near-duplicate cluster stays

    many_n, many = tokenize_partition(lakehouse, gpt2, TokenizeParams(files_per_slice=1), reverse=True)
    assert many_n == FILES and many == totals
    assert table_digest(lakehouse, TOKENIZED_DOCUMENTS) == one
    stored = lakehouse.scan(TOKENIZED_DOCUMENTS).to_pylist()
    assert [r["doc_id"] for r in stored] == [r["doc_id"] for r in expected]  # plan order, not finishing order
    assert all(
        decode_document(gpt2, tokens_from_bytes(r["tokens"], r["token_dtype"])) == e["text"]
        for r, e in zip(stored, expected, strict=True)
    )

    # encode calls and row groups of a few documents: other files, the same rows
    tokenize_partition(lakehouse, gpt2, TokenizeParams(docs_per_row_group=2, encode_batch_docs=3, files_per_slice=2))
    assert table_digest(lakehouse, TOKENIZED_DOCUMENTS) == one


def test_the_check_passes_then_names_a_corrupted_document(upstream):
    lakehouse, _, gpt2 = upstream
    tokenize_partition(lakehouse, gpt2, TokenizeParams(files_per_slice=2))
    report = tokenize.check_documents(lakehouse, "gpt2", CRAWL, SEGMENT, decode_sample=4)
    assert (report.rows_checked, report.rows_decoded, report.problems) == (42, 4, [])

    stored = lakehouse.scan(TOKENIZED_DOCUMENTS).to_pylist()
    victim = stored[10]
    bad = bytearray(victim["tokens"])
    bad[4] ^= 0x01
    victim["tokens"] = bytes(bad)
    write_partition(
        lakehouse, TOKENIZED_DOCUMENTS, tokenize.partition(gpt2.info.tokenizer_id, CRAWL, SEGMENT), stored, files=3
    )
    report = tokenize.check_documents(lakehouse, None, None, None, decode_sample=4)
    assert report.rows_checked == 42 and report.problems == [
        {"doc_id": victim["doc_id"], "problem": "checksum mismatch"}
    ]
    assert tokenize.check_documents(lakehouse, "olmo2-cl100k", None, None, 4).rows_checked == 0


def test_a_tokenizer_file_changed_after_the_plan_is_refused(upstream):
    lakehouse, _, gpt2 = upstream
    ref = TokenizerRef("gpt2", DEFAULT_TOKENIZERS["gpt2"], "0" * 64)  # the id the plan saw
    pins = lakehouse.snapshot_ids(tokenize.UPSTREAM)
    (task, *_) = tokenize.plan(lakehouse, ref, CRAWL, SEGMENT, pins, TokenizeParams(), "run")
    with pytest.raises(ValueError, match="the file changed during the run"):
        tokenize.run_task(task)


def test_no_kept_document_is_an_empty_partition(lakehouse):
    pins = lakehouse.snapshot_ids(tokenize.UPSTREAM)
    gpt2 = load_tokenizer(DEFAULT_TOKENIZERS["gpt2"], "gpt2")
    ref = TokenizerRef("gpt2", DEFAULT_TOKENIZERS["gpt2"], gpt2.info.tokenizer_id)
    assert tokenize.plan(lakehouse, ref, CRAWL, SEGMENT, pins, TokenizeParams(), "run") == []
    done = tokenize.commit(lakehouse, gpt2.info.tokenizer_id, CRAWL, SEGMENT, [], PROVENANCE)
    assert done.snapshot_id is not None and lakehouse.scan(TOKENIZED_DOCUMENTS).num_rows == 0
    assert isinstance(lakehouse.scan(TOKENIZED_DOCUMENTS), pa.Table)
