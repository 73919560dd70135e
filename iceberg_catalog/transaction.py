"""Iceberg transactions whose cost does not grow with every read of the pending metadata.

pyiceberg 0.12's `Transaction.table_metadata` applies the staged updates to the table's metadata and returns a
deep copy of the result on every read, and a `delete` + `add_files` commit reads it 37 times: at 800 snapshots
in a table's history that is ~1.1 CPU s a commit, nearly all `copy.deepcopy` of pydantic models (a partition
commit per Common Crawl WARC file makes that history fast). `transaction(table)` returns a Transaction that
computes it once per state of the transaction (the table's metadata object and the tuple of staged updates,
which pyiceberg replaces, never mutates, on every `_stage` and commit) and hands out that one result. Sharing
it is safe because pyiceberg's metadata models are frozen and every change goes through `model_copy(update=)`;
the result is exactly what pyiceberg computes (`bench/commit.py` and `tests/iceberg_catalog/test_transaction.py`
compare both).
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import update_table_metadata


class MemoTransaction(Transaction):
    """A pyiceberg Transaction that computes `table_metadata` once per (table metadata, staged updates)."""

    _memo: tuple[TableMetadata, tuple, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates, memo = self._table.metadata, self._updates, self._memo
        if memo is None or memo[0] is not base or memo[1] is not updates:
            memo = self._memo = (base, updates, update_table_metadata(base, updates))
        return memo[2]


def transaction(table: Table) -> Transaction:
    """`table.transaction()`, with the pending metadata computed once per staged change (see module doc)."""
    return MemoTransaction(table)
