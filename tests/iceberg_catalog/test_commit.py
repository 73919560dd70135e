"""The commit helper: exact partition overwrite, provenance on every snapshot, serialised committers."""

from __future__ import annotations

import multiprocessing as mp
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from iceberg_catalog import CatalogConfig, Provenance, config_hash, open_catalog, overwrite_partition
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS

T = "raw.rejected_records"
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rejects(crawl: str, segment: str, n: int, reason: str = "garbage_bytes") -> pa.Table:
    rows = [{"crawl": crawl, "segment": segment, "warc_file": "f", "warc_offset": i, "warc_length": 1,
             "reason": reason, "detail": None, "record_id": None, "record_type": None, "target_uri": None,
             "deletion_key": None, "ingested_at": NOW} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=RAW_REJECTED_RECORDS.arrow_schema)


def prov(run: str, key: str = "c/s", upstream=None) -> Provenance:
    return Provenance("raw/rejected_records", key, run, "raw-1", config_hash({"x": 1}), upstream or {})


def counts(catalog) -> dict[tuple[str, str], int]:
    t = catalog.load_table(T).scan(selected_fields=("crawl", "segment")).to_arrow()
    out: dict = {}
    for c, s in zip(t["crawl"].to_pylist(), t["segment"].to_pylist()):
        out[(c, s)] = out.get((c, s), 0) + 1
    return out


def test_overwrite_replaces_exactly_one_partition(tokenlake_home):
    catalog = open_catalog()
    overwrite_partition(catalog, T, {"crawl": "c", "segment": "s1"}, [rejects("c", "s1", 5)], prov("r1", "c/s1"))
    overwrite_partition(catalog, T, {"crawl": "c", "segment": "s2"}, [rejects("c", "s2", 3)], prov("r2", "c/s2"))
    # re-materialise s1 twice, in two batches: never duplicated, s2 untouched
    for run in ("r3", "r4"):
        res = overwrite_partition(catalog, T, {"crawl": "c", "segment": "s1"},
                                  [rejects("c", "s1", 4), rejects("c", "s1", 3)], prov(run, "c/s1"))
        assert res.rows == 7
    assert counts(catalog) == {("c", "s1"): 7, ("c", "s2"): 3}


def test_every_snapshot_carries_provenance(tokenlake_home):
    catalog = open_catalog()
    up = {"raw.warc_records": 123}
    res = overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [rejects("c", "s", 2)], prov("run-a", upstream=up))
    res2 = overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [rejects("c", "s", 2)], prov("run-b", upstream=up))
    assert res2.snapshot_id != res.snapshot_id
    table = catalog.load_table(T)
    for snap in table.snapshots():
        p = Provenance.from_snapshot_summary(snap.summary.additional_properties)
        assert p["asset-key"] == "raw/rejected_records" and p["partition-key"] == "c/s"
        assert p["code-version"] == "raw-1" and p["config-hash"] == config_hash({"x": 1})
        assert p["upstream-snapshot-ids"] == '{"raw.warc_records": 123}'
        assert p["dagster-run-id"] in ("run-a", "run-b")
    assert Provenance.from_snapshot_summary(table.current_snapshot().summary.additional_properties)["dagster-run-id"] == "run-b"


def test_empty_partition_still_records_a_snapshot(tokenlake_home):
    catalog = open_catalog()
    overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [rejects("c", "s", 2)], prov("r1"))
    res = overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [], prov("r2"))
    assert res.rows == 0 and counts(catalog) == {}
    props = catalog.load_table(T).current_snapshot().summary.additional_properties
    assert props["tokenlake.dagster-run-id"] == "r2"


def test_rows_outside_the_partition_are_refused(tokenlake_home):
    catalog = open_catalog()
    with pytest.raises(ValueError, match=r"outside partition segment='s'"):
        overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [rejects("c", "other", 1)], prov("r"))
    with pytest.raises(ValueError, match="partitioned by"):
        overwrite_partition(catalog, T, {"crawl": "c"}, [], prov("r"))
    with pytest.raises(ValueError, match="declared schema"):
        overwrite_partition(catalog, T, {"crawl": "c", "segment": "s"}, [pa.table({"crawl": ["c"]})], prov("r"))
    assert counts(catalog) == {}


def test_config_hash_is_canonical():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})


def _committer(args) -> int:
    home, worker, n = args
    catalog = open_catalog(CatalogConfig.embedded(home))
    for i in range(n):
        overwrite_partition(catalog, T, {"crawl": "c", "segment": f"w{worker}"},
                            [rejects("c", f"w{worker}", i + 1)], prov(f"w{worker}-{i}", f"c/w{worker}"),
                            catalog_fingerprint=CatalogConfig.embedded(home).fingerprint())
    return worker


def test_concurrent_committers_on_sqlite_lose_nothing(tokenlake_home):
    open_catalog()  # create tables first
    workers, n = 4, 3
    with mp.get_context("spawn").Pool(workers) as pool:
        assert sorted(pool.map(_committer, [(str(tokenlake_home), w, n) for w in range(workers)])) == list(range(workers))
    catalog = open_catalog()
    assert counts(catalog) == {("c", f"w{w}"): n for w in range(workers)}
    runs = {s.summary.additional_properties["tokenlake.dagster-run-id"] for s in catalog.load_table(T).snapshots()}
    assert runs == {f"w{w}-{i}" for w in range(workers) for i in range(n)}
