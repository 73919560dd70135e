"""The raw ingest asset through Dagster (`materialize` on a temp instance) into a real Iceberg catalog."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.compute as pc
from warcio.archiveiterator import ArchiveIterator

from assets.raw import defs as raw_defs
from iceberg_catalog import Lakehouse, Provenance, open_catalog
from iceberg_catalog.digest import table_digest
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
from resources import IcebergCatalogResource, LocalCrawlSource, TaskExecutorResource

from conftest import SAMPLE_CRAWL, SAMPLE_KEYS, materialize_segments
from warc_fixtures import AUT_0_17, bad_cases


def scan(catalog, ident, *cols):
    return (
        catalog.load_table(ident).scan(selected_fields=cols).to_arrow()
        if cols
        else catalog.load_table(ident).scan().to_arrow()
    )


def warcio_responses(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(1 for r in ArchiveIterator(fh) if r.rec_type == "response")


def test_sample_crawl_rows_match_warcio_and_payload_digests(tokenlake_home, instance):
    materialize_segments(instance, SAMPLE_CRAWL, SAMPLE_KEYS)
    catalog = open_catalog()
    table = scan(
        catalog,
        "raw.warc_records",
        "warc_file",
        "record_id",
        "payload",
        "payload_sha1",
        "payload_digest_declared",
        "payload_digest_verified",
        "crawl",
        "segment",
    )
    per_file = Counter(Path(u).name for u in table["warc_file"].to_pylist())
    for path in sorted(SAMPLE_CRAWL.rglob("*.warc.gz")):
        assert per_file[path.name] == warcio_responses(path), path.name
    assert table.num_rows == 357
    assert len(set(table["record_id"].to_pylist())) == 357
    declared = table.filter(pc.is_valid(table["payload_digest_declared"]))
    assert declared["payload_sha1"].to_pylist() == declared["payload_digest_declared"].to_pylist()
    assert set(table["payload_digest_verified"].to_pylist()) <= {True, None}
    assert scan(catalog, "raw.rejected_records").num_rows == 0


def test_rematerialising_keeps_count_and_adds_provenance_snapshot(tokenlake_home, instance):
    key = SAMPLE_KEYS[0]
    (first,) = materialize_segments(instance, SAMPLE_CRAWL, [key])
    catalog = open_catalog()
    snap1 = catalog.load_table("raw.warc_records").current_snapshot().snapshot_id
    (second,) = materialize_segments(instance, SAMPLE_CRAWL, [key])
    table = catalog.load_table("raw.warc_records")
    assert table.scan().to_arrow().num_rows == 16
    snap2 = table.current_snapshot()
    assert snap2.snapshot_id != snap1
    p = Provenance.from_snapshot_summary(snap2.summary.additional_properties)
    assert p["asset-key"] == "raw/warc_records"
    assert p["partition-key"] == key
    assert p["dagster-run-id"] == second.run_id != first.run_id
    assert p["code-version"] == "raw-1"
    assert len(p["config-hash"]) == 64
    assert p["upstream-snapshot-ids"] == "{}"
    assert len(p["source-fingerprint"]) == 64
    # the materialisation event names the snapshot, so the UI links Dagster history to Iceberg history
    mats = instance.fetch_materializations(dg.AssetKey(["raw", "warc_records"]), limit=1).records
    assert mats[0].asset_materialization.metadata["iceberg_snapshot_id"].value == str(snap2.snapshot_id)


def test_bad_input_partition_succeeds_and_accounts_for_every_record(tokenlake_home, instance, crawl_root):
    cases = bad_cases()
    files = {f"{i:02d}-{c.name}.warc.gz": c.data for i, c in enumerate(cases)}
    files["99-aut-warc-0.17.warc.gz"] = AUT_0_17
    root = crawl_root({"BAD-CRAWL/seg-1": files})
    materialize_segments(instance, root, ["BAD-CRAWL/seg-1"])
    catalog = open_catalog()
    rows = Counter(Path(u).name for u in scan(catalog, "raw.warc_records", "warc_file")["warc_file"].to_pylist())
    rej = scan(catalog, "raw.rejected_records", "warc_file", "reason", "warc_offset")
    rejects: dict[str, Counter] = {}
    for f, reason in zip(rej["warc_file"].to_pylist(), rej["reason"].to_pylist()):
        rejects.setdefault(Path(f).name, Counter())[reason] += 1
    for i, c in enumerate(cases):
        name = f"{i:02d}-{c.name}.warc.gz"
        assert rows[name] == c.rows, name
        assert dict(rejects.get(name, {})) == c.rejects, name
        assert rows[name] + sum(rejects.get(name, Counter()).values()) == c.records_in_file, name
    assert rows["99-aut-warc-0.17.warc.gz"] == 299 and "99-aut-warc-0.17.warc.gz" not in rejects
    assert all(r is not None for r in rej["reason"].to_pylist())


class ReversedExecutor:
    """Runs the plan backwards and returns results in completion order: a stand-in for a cluster whose tasks
    finish in any order (the commit must not care)."""

    def map(self, fn, tasks, progress=None):
        return [fn(t) for t in reversed(tasks)]


class ReversedExecutorResource(TaskExecutorResource):
    def executor(self):
        return ReversedExecutor()


def test_raw_tables_do_not_depend_on_task_grouping_or_order(tmp_path, monkeypatch, instance, crawl_root):
    """Bad files and good files in one segment: one task per file, all files in one task, and the plan run
    backwards give identical raw tables (rows and rejects) and metadata counts."""
    files = {f"{i:02d}-{c.name}.warc.gz": c.data for i, c in enumerate(bad_cases())}
    files.update({p.name: p for p in sorted(SAMPLE_CRAWL.rglob("wget-2024/warc/*.warc.gz"))})
    root = crawl_root({"MIXED/seg-1": files})
    instance.add_dynamic_partitions("crawl_segments", ["MIXED/seg-1"])
    digests, counts = [], []
    for n, (per_task, executor) in enumerate(
        ((1, TaskExecutorResource()), (len(files), TaskExecutorResource()), (2, ReversedExecutorResource()))
    ):
        monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / f"home{n}"))
        lakehouse = Lakehouse()
        res = dg.materialize(
            list(raw_defs.defs.assets),
            partition_key="MIXED/seg-1",
            instance=instance,
            resources={
                "catalog": IcebergCatalogResource(),
                "executor": executor,
                "crawl_source": LocalCrawlSource(root=str(root)),
            },
            run_config={"ops": {"raw_warc_ingest": {"config": {"files_per_task": per_task}}}},
        )
        meta = res.asset_materializations_for_node("raw_warc_ingest")[0].metadata
        assert meta["tasks"].value == -(-len(files) // per_task)
        counts.append((meta["dagster/row_count"].value, meta["records_by_type"].value))
        digests.append([table_digest(lakehouse, t) for t in (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)])
    assert digests[0] == digests[1] == digests[2]
    assert counts[0] == counts[1] == counts[2]
    assert digests[0][0]["rows"] > 0 and digests[0][1]["rows"] > 0
    assert counts[0][0] == digests[0][0]["rows"]  # the row count shown in the UI is the rows written
