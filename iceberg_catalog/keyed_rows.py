"""Tables with one row per key, identity-partitioned by that key (governance.proposals by proposal_id,
governance.deletion_requests by request_id): a row changes by replacing its key's partition in one commit, so
the table's snapshot history records every change of every row. Dagster-free."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyiceberg.expressions import EqualTo

from iceberg_catalog.commit import Provenance
from iceberg_catalog.lakehouse import Lakehouse
from iceberg_catalog.schemas import TableDef


def key_column(t: TableDef) -> str:
    """The key of a one-row-per-key table: its single partition column."""
    if len(t.partition_by) != 1:
        raise ValueError(f"{t}: a one-row-per-key table is partitioned by its key alone, not by {t.partition_by}")
    return t.partition_by[0]


def put_row(lakehouse: Lakehouse, t: TableDef, row: Mapping, provenance: Provenance) -> None:
    """Write `row` as the one row of its key in `t` (replacing the key's previous row); one commit."""
    key = key_column(t)
    writer = lakehouse.writer(t, {key: row[key]})
    writer.write(pa.Table.from_pylist([dict(row)], schema=t.arrow_schema))
    writer.commit(provenance)


def get_row(lakehouse: Lakehouse, t: TableDef, value: str) -> dict | None:
    """The row of key `value` in `t` (None when there is none)."""
    rows = lakehouse.scan(t, row_filter=EqualTo(key_column(t), value)).to_pylist()
    return rows[0] if rows else None
