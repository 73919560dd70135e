"""curated.exact_duplicates incrementally by crawl: a run recomputes only the crawls from the first whose
curated.documents files changed on, leaves the earlier crawls' files as they are, and ends with the rows of a
from-scratch run. curated.documents is written straight into a real lakehouse (no curation run)."""

from __future__ import annotations

import hashlib

import dagster as dg
import pyarrow.compute as pc
import pytest
from pyiceberg.expressions import EqualTo

from assets.curated import curate
from assets.curated import defs as curated_defs
from iceberg_catalog import Provenance
from iceberg_catalog.digest import rows_digest, table_digest
from iceberg_catalog.schemas import CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES
from tests.curated.test_curated_asset import EXACT_OP, EXACT_ORDER, PROV, ReversedExecutorResource, resources
from tests.tokenized.partitions import curated_rows, write_partition

# texts per crawl: repeats within a crawl and across crawls (the pools overlap), some documents not kept
POOLS = {"CC-1": range(0, 20), "CC-2": range(10, 30), "CC-3": range(5, 40, 2)}


def write_crawl(lakehouse, crawl: str, texts, segments: int = 2) -> None:
    """One crawl of curated.documents in `segments` segments; doc ids unique across crawls."""
    rows = curated_rows([f"text {t}" for t in texts], crawl, "s", not_kept=range(3, len(texts), 7))
    for r in rows:
        r["doc_id"] = f"{crawl}-{r['doc_id']}"
    for k in range(segments):
        seg = [dict(r, segment=f"s{k}") for r in rows[k::segments]]
        write_partition(lakehouse, CURATED_DOCUMENTS, {"crawl": crawl, "segment": f"s{k}"}, seg)


def corpus(lakehouse, *crawls: str) -> None:
    for crawl in crawls:
        pool = list(POOLS[crawl])
        write_crawl(lakehouse, crawl, pool + pool[:3])  # the first three texts twice within the crawl


def dedup(instance, shards: int = 4, reverse: bool = False) -> dict:
    """Materialise curated/exact_duplicates; its metadata."""
    res = dg.materialize(
        list(curated_defs.defs.assets),
        instance=instance,
        resources=resources(executor=ReversedExecutorResource() if reverse else None),
        run_config={"ops": {EXACT_OP: {"config": {"shards": shards}}}},
        selection=dg.AssetSelection.assets(curated_defs.EXACT_DUPLICATES),
    )
    return {k: v.value for k, v in res.asset_materializations_for_node(EXACT_OP)[0].metadata.items()}


def oracle(lakehouse):
    """The rows one process finds over the whole of curated.documents (a from-scratch run)."""
    whole = lakehouse.scan(CURATED_DOCUMENTS, curate.EXACT_COLUMNS).filter(pc.field("kept"))
    return curate.exact_duplicate_rows(whole.select(["doc_id", "crawl", "segment", "text_sha256"]))


def per_crawl(lakehouse) -> dict[str, tuple[frozenset, str]]:
    """Per crawl of curated.exact_duplicates: its data files (with their bytes' sha256) and its rows' digest."""
    snap = lakehouse.snapshot_id(CURATED_EXACT_DUPLICATES)
    io = lakehouse.file_io()
    out: dict[str, tuple[frozenset, str]] = {}
    for crawl in lakehouse.stored_crawls(CURATED_EXACT_DUPLICATES, lakehouse.snapshot_id(CURATED_EXACT_DUPLICATES)):
        files = lakehouse.slices(CURATED_EXACT_DUPLICATES, snap, EqualTo("crawl", crawl), files_per_slice=None)[0].files
        with_bytes = []
        for f in files:
            with io.new_input(f.file.file_path).open() as fh:
                with_bytes.append((f.file.file_path, hashlib.sha256(fh.read()).hexdigest()))
        rows = lakehouse.scan(CURATED_EXACT_DUPLICATES, row_filter=EqualTo("crawl", crawl))
        out[crawl] = (frozenset(with_bytes), rows_digest(rows))
    return out


def test_which_crawls_a_run_recomputes():
    """From the first crawl whose files changed (added, rewritten, gone) on; all without a usable record."""
    recorded = {"A": "1", "B": "2", "C": "3"}
    assert curate.crawls_to_recompute(recorded, recorded, {"B", "C"}) == []
    assert curate.crawls_to_recompute(recorded, {**recorded, "D": "4"}, {"B", "C"}) == ["D"]
    assert curate.crawls_to_recompute(recorded, {**recorded, "B": "x"}, {"B", "C"}) == ["B", "C"]
    assert curate.crawls_to_recompute(recorded, {"A": "1", "C": "3"}, {"B", "C"}) == ["B", "C"]  # B is gone
    assert curate.crawls_to_recompute(None, {"A": "1"}, {"Z"}) == ["A", "Z"]
    prov = Provenance(
        "curated/exact_duplicates", None, "r", "exact-dedup-1", "h", {}, curate.fingerprint_stamp(recorded)
    )
    summary = prov.snapshot_properties()
    assert curate.recorded_fingerprints(summary, prov) == recorded
    for other in (PROV, Provenance("curated/exact_duplicates", None, "r", "exact-dedup-1", "other-config")):
        assert curate.recorded_fingerprints(summary, other) is None  # another config hash: everything


@pytest.mark.parametrize("shards,reverse", [(1, False), (3, True), (16, True)])
def test_an_added_crawl_leaves_earlier_crawls_byte_identical(lakehouse, instance, shards, reverse):
    """CC-3 added: only its partition is written; CC-1 and CC-2 keep their very files (same bytes, same rows),
    and the table equals a from-scratch run's, for any shard count and task order."""
    corpus(lakehouse, "CC-1", "CC-2")
    first = dedup(instance, shards, reverse)
    assert first["recomputed_crawls"] == "CC-1, CC-2"
    before = per_crawl(lakehouse)
    assert set(before) == {"CC-1", "CC-2"}
    corpus(lakehouse, "CC-3")
    second = dedup(instance, shards, reverse)
    assert second["recomputed_crawls"] == "CC-3"
    after = per_crawl(lakehouse)
    assert {c: after[c] for c in before} == before
    table = lakehouse.scan(CURATED_EXACT_DUPLICATES)
    assert table.sort_by(EXACT_ORDER).to_pylist() == oracle(lakehouse).to_pylist()
    assert set(table["crawl"].to_pylist()) == {"CC-1", "CC-2", "CC-3"}
    incremental = table_digest(lakehouse, CURATED_EXACT_DUPLICATES)
    curate.commit_exact_duplicates(lakehouse, [], [], PROV)  # no record: the next run starts from scratch
    full = dedup(instance, shards, reverse)
    assert full["recomputed_crawls"] == "CC-1, CC-2, CC-3"
    assert table_digest(lakehouse, CURATED_EXACT_DUPLICATES) == incremental
    numbers = ("dagster/row_count", "kept_before_dedup", "kept_after_dedup", "funnel_all_partitions")
    assert {k: second[k] for k in numbers} == {k: full[k] for k in numbers}
    assert second["dagster/row_count"] == table.num_rows


def test_a_changed_earlier_crawl_recomputes_from_that_crawl_on(lakehouse, instance):
    """CC-2 rewritten (two CC-1 texts gone, two copies of a CC-3 text added) recomputes CC-2 and CC-3; CC-1
    keeps its files; a rerun with nothing changed writes no partition and keeps every file."""
    corpus(lakehouse, "CC-1", "CC-2", "CC-3")
    assert dedup(instance)["recomputed_crawls"] == "CC-1, CC-2, CC-3"
    before = per_crawl(lakehouse)
    unchanged = dedup(instance)
    assert unchanged["recomputed_crawls"] == "none" and per_crawl(lakehouse) == before
    assert unchanged["dagster/row_count"] == lakehouse.scan(CURATED_EXACT_DUPLICATES).num_rows
    write_crawl(lakehouse, "CC-2", [*range(12, 30), 35, 35])
    assert dedup(instance)["recomputed_crawls"] == "CC-2, CC-3"
    after = per_crawl(lakehouse)
    assert after["CC-1"] == before["CC-1"] and after["CC-3"] != before["CC-3"]
    assert lakehouse.scan(CURATED_EXACT_DUPLICATES).sort_by(EXACT_ORDER).to_pylist() == oracle(lakehouse).to_pylist()
