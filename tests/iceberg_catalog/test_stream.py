"""Data files read a bounded batch at a time (`iceberg_catalog.stream`): the same rows as pyiceberg's own scan,
never more than `batch_rows` rows per batch, and pyiceberg's path wherever a file is not plain."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, In
from pyiceberg.types import StringType
from test_commit import prov, rejects

from iceberg_catalog import FileWriter, Lakehouse, TaskResult
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS
from iceberg_catalog.stream import plain_file_batches


def write(lakehouse: Lakehouse, segment: str, n: int) -> None:
    part = {"crawl": "c", "segment": segment}
    table = rejects("c", segment, n)
    table = table.set_column(5, "reason", pa.array([("a", "b", "c")[i % 3] for i in range(n)]))
    writer = FileWriter(lakehouse.output(RAW_REJECTED_RECORDS, part, f"r-{segment}", 0), row_group_rows=7)
    writer.write(table)
    lakehouse.commit(
        [TaskResult(0, (writer.close(),))], {RAW_REJECTED_RECORDS: part}, {RAW_REJECTED_RECORDS: prov(segment)}
    )


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["segment"], r["warc_offset"]))


def test_a_plain_file_streams_in_bounded_batches_with_the_scans_rows(lakehouse):
    for seg, n in (("s1", 50), ("s2", 31)):
        write(lakehouse, seg, n)
    snap = lakehouse.snapshot_id(RAW_REJECTED_RECORDS)
    for where in (
        None,
        And(EqualTo("reason", "b"), GreaterThanOrEqual("warc_offset", 10)),
        In("warc_offset", [1, 2, 40]),
    ):
        for columns in (None, ("segment", "warc_offset", "reason"), ("warc_offset",)):
            slices = lakehouse.slices(RAW_REJECTED_RECORDS, snap, where, columns)
            batches = [b for s in slices for b in lakehouse.read_slice(s, batch_rows=5)]
            expected = lakehouse.scan_at(RAW_REJECTED_RECORDS, snap, columns, where)
            assert all(b.num_rows <= 5 for b in batches)
            got = pa.Table.from_batches(batches, expected.schema) if batches else expected.schema.empty_table()
            assert got.schema == expected.schema, (where, columns)
            key = ["segment", "warc_offset"] if columns is None or "segment" in columns else ["warc_offset"]
            assert got.sort_by([(k, "ascending") for k in key]).equals(
                expected.sort_by([(k, "ascending") for k in key])
            ), (where, columns)
        assert sum(b.num_rows for b in lakehouse.batches_at(RAW_REJECTED_RECORDS, snap, None, where)) == (
            lakehouse.scan_at(RAW_REJECTED_RECORDS, snap, None, where).num_rows
        )


def test_a_file_without_a_column_of_the_table_takes_pyicebergs_path(lakehouse):
    """After a column is added, the files lack it: not plain (None), and read_slice still gives their rows with
    the new column null."""
    write(lakehouse, "s1", 12)
    with lakehouse.table(RAW_REJECTED_RECORDS).update_schema() as update:
        update.add_column("extra", StringType())
    write(lakehouse, "s2", 1)  # a snapshot with the new schema
    table = lakehouse.table(RAW_REJECTED_RECORDS)
    snap = lakehouse.snapshot_id(RAW_REJECTED_RECORDS)
    scan = table.scan(snapshot_id=snap)
    task = next(t for t in scan.plan_files() if t.file.partition[1] == "s1")
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    target = schema_to_pyarrow(scan.projection())
    assert plain_file_batches(table.io, task, table.schema(), scan.projection(), scan.row_filter, target) is None
    rows = [
        r for s in lakehouse.slices(RAW_REJECTED_RECORDS, snap) for b in lakehouse.read_slice(s) for r in b.to_pylist()
    ]
    assert len(rows) == 13 and all(r["extra"] is None for r in rows)
