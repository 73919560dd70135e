"""The memoising Iceberg transaction: every read of the pending metadata equals what pyiceberg computes afresh,
while a partition commit computes it a handful of times instead of once per read."""

from __future__ import annotations

import pydantic
import pytest
from pyiceberg.table import Transaction

import iceberg_catalog.commit as commit_module
from iceberg_catalog import Provenance, config_hash
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS
from iceberg_catalog.transaction import MemoTransaction, transaction
from tests.iceberg_catalog.test_commit import rejects


def comparable(metadata):
    # pyiceberg stamps "now" on a metadata whose updates left last_updated_ms alone: two computations of the
    # same staged updates differ only there
    return metadata.model_copy(update={"last_updated_ms": 0})


class Checked(MemoTransaction):
    """Compares every read with pyiceberg's own property and counts reads and computations."""

    reads = computed = 0

    @property
    def table_metadata(self):
        before = self._memo
        got = MemoTransaction.table_metadata.fget(self)
        Checked.computed += self._memo is not before
        Checked.reads += 1
        assert comparable(got) == comparable(Transaction.table_metadata.fget(self))
        return got


def test_partition_commits_read_what_pyiceberg_computes(lakehouse, monkeypatch):
    monkeypatch.setattr(commit_module, "transaction", Checked)
    Checked.reads = Checked.computed = 0
    prov = Provenance("raw/rejected_records", "c/s", "run", "raw-1", config_hash({}))
    for i, (segment, n) in enumerate([("s1", 3), ("s2", 2), ("s1", 5), ("s1", 0), ("s2", 4)]):
        writer = lakehouse.writer(RAW_REJECTED_RECORDS, {"crawl": "c", "segment": segment})
        if n:
            writer.write(rejects("c", segment, n))
        writer.commit(prov)
        reads, computed = Checked.reads, Checked.computed
        # pyiceberg alone deep-copies the whole metadata on each of ~40 reads a commit; here ~3 computations
        assert reads >= 20 * (i + 1)
        assert computed <= 4 * (i + 1)
    table = lakehouse.table(RAW_REJECTED_RECORDS)
    rows = table.scan(selected_fields=("segment",)).to_arrow()["segment"].to_pylist()
    assert sorted(rows) == ["s2"] * 4  # s1 was replaced by an empty partition, s2 by 4 rows
    ops = [s.summary.operation.value for s in table.snapshots()]
    # a first commit has nothing to delete (no snapshot); every later one deletes the partition, then appends
    assert ops == ["append", "append"] + ["delete", "append"] * 3


def test_staged_updates_are_seen_and_results_are_frozen(lakehouse):
    table = lakehouse.table(RAW_REJECTED_RECORDS)
    tx = transaction(table)
    first = tx.table_metadata
    assert tx.table_metadata is first  # nothing staged since: the one computation is handed out again
    tx.set_properties({"tokenlake.test": "1"})
    staged = tx.table_metadata
    assert staged is not first and staged.properties["tokenlake.test"] == "1"
    with pytest.raises(pydantic.ValidationError):  # shared, so it must not be changeable in place
        staged.last_updated_ms = 1
    tx.commit_transaction()
    assert lakehouse.table(RAW_REJECTED_RECORDS).properties["tokenlake.test"] == "1"
