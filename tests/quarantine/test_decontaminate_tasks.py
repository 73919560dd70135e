"""quarantine/matches as plan -> task -> commit on a real lakehouse, with real eval items injected into real
documents: the matches do not depend on how the plan is cut or the order tasks finish in, keep document
order then match order, and the screening sums every task."""

from __future__ import annotations

import uuid

import pytest

from assets.quarantine import decontaminate
from assets.quarantine.benchmarks import GSM8K, read_benchmark
from assets.quarantine.decontaminate import MatchParams
from assets.quarantine.near_match import NearMatchIndex, find_matches
from assets.quarantine.ngrams import NgramIndex
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import QUARANTINE_EVAL_ITEMS, QUARANTINE_MATCHES, QUARANTINE_SCREENINGS
from tests.quarantine.injection import real_documents
from tests.tokenized.partitions import PROVENANCE, curated_rows, write_curated

CRAWL, SEGMENT = "TEST-CRAWL", "seg-1"
FILES = 4
NOT_KEPT = (5,)


def injected_documents(items) -> list[str]:
    """40 real documents; four of them quote GSM8K items (one quotes two, one is not kept)."""
    docs = real_documents()[:40]
    docs[3] = docs[3] + "\n" + items[0].text
    docs[5] = items[1].text + "\n" + docs[5]  # not kept: never screened
    docs[17] = items[7].text.upper() + "\n" + docs[17] + "\n" + items[2].text
    docs[33] = docs[33][:200] + " " + " ".join(items[11].text.split()[:20]) + " " + docs[33][200:]
    return docs


@pytest.fixture
def upstream(lakehouse):
    items = read_benchmark(GSM8K)
    rows = curated_rows(injected_documents(items), CRAWL, SEGMENT, NOT_KEPT)
    write_curated(lakehouse, rows, FILES)
    writer = lakehouse.writer(QUARANTINE_EVAL_ITEMS, {"benchmark": "gsm8k"})
    writer.write(decontaminate.eval_item_rows(items))
    writer.commit(PROVENANCE)
    return lakehouse, rows, items


def screen(lakehouse, params: MatchParams, reverse: bool = False):
    """Plan, run every task, commit (results reversed when asked); the task results in plan order."""
    pins = lakehouse.snapshot_ids(decontaminate.UPSTREAM)
    items = decontaminate.pinned_items(lakehouse, "gsm8k", pins[QUARANTINE_EVAL_ITEMS.identifier])
    tasks = decontaminate.plan(lakehouse, items, CRAWL, SEGMENT, pins, params, uuid.uuid4().hex)
    results = [decontaminate.run_task(t) for t in tasks]
    decontaminate.commit(lakehouse, "gsm8k", CRAWL, SEGMENT, results[::-1] if reverse else results, pins, PROVENANCE)
    return results


def test_one_task_or_several_give_the_same_matches_in_document_order(upstream):
    lakehouse, rows, items = upstream
    one = screen(lakehouse, MatchParams(files_per_slice=FILES))
    digest = table_digest(lakehouse, QUARANTINE_MATCHES)
    [screening_one] = lakehouse.scan(QUARANTINE_SCREENINGS).to_pylist()
    many = screen(lakehouse, MatchParams(files_per_slice=1), reverse=True)
    assert (len(one), len(many)) == (1, FILES)
    assert table_digest(lakehouse, QUARANTINE_MATCHES) == digest and digest["rows"] >= 4

    # the rows: every kept document in curated order, each document's matches in find_matches order
    texts = [i.text for i in items]
    ngram, near = NgramIndex.build(texts), NearMatchIndex.build(texts)
    expected = [
        (r["doc_id"], items[m.item_index].item_id, m.kind, m.char_start, m.char_end)
        for r in rows
        if r["kept"]
        for m in find_matches(r["text"], ngram, near)
    ]
    stored = lakehouse.scan(QUARANTINE_MATCHES).to_pylist()
    assert [(r["doc_id"], r["item_id"], r["kind"], r["char_start"], r["char_end"]) for r in stored] == expected
    assert {r["doc_id"] for r in stored} == {"d003", "d017", "d033"}
    assert {(r["doc_id"], r["item_id"]) for r in stored} >= {
        ("d003", "gsm8k/test/0"),
        ("d017", "gsm8k/test/7"),
        ("d017", "gsm8k/test/2"),
        ("d033", "gsm8k/test/11"),
    }
    assert {r["decision"] for r in stored} == {"eval_contaminated"}

    # the screening sums every task, whatever the cut
    [screening] = lakehouse.scan(QUARANTINE_SCREENINGS).to_pylist()
    for s in (screening_one, screening):
        assert (s["documents_checked"], s["contaminated_documents"], s["matches"]) == (39, 3, len(expected))
    summary = decontaminate.Screening.of(many)
    assert summary.sample == [[d, i, k, r["overlap_fraction"], a, b] for (d, i, k, a, b), r in zip(expected, stored)]


def test_the_indexes_are_built_once_per_process(upstream):
    lakehouse, _, _ = upstream
    results = screen(lakehouse, MatchParams(files_per_slice=1, n=12))
    builds = [r.stats["index_built"] for r in results]
    assert builds == [True] + [False] * (FILES - 1)
    assert len({r.stats["index_bytes"] for r in results}) == 1
    again = screen(lakehouse, MatchParams(files_per_slice=1, n=12, near=False))  # other parameters: a new build
    assert again[0].stats["index_built"] and again[0].stats["index_bytes"] < results[0].stats["index_bytes"]


def test_a_benchmark_without_items_is_refused(lakehouse):
    with pytest.raises(ValueError, match="materialise quarantine/eval_items for partition 'nope' first"):
        decontaminate.pinned_items(lakehouse, "nope", None)
