"""The one lakehouse handle: a catalog, the lock key of its commits, tables by `TableDef`, pinned scans.

Every state module, the Dagster resource and the loader go through `Lakehouse`; none names a table by a
string. The handle pickles as its configuration only (the opened catalog is not sent), so a plan can hand it
to tasks that run in another process or on another machine, where it reopens the catalog on first use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import FileScanTask, Table

from iceberg_catalog.catalog import CatalogConfig
from iceberg_catalog.commit import (
    CommitResult,
    PartitionWriter,
    Provenance,
    TaskOutput,
    TaskResult,
    commit_results,
    table_commit_lock,
    task_output,
)
from iceberg_catalog.credentials import redact_uri
from iceberg_catalog.schemas import TABLES, TableDef
from iceberg_catalog.stream import BATCH_ROWS, plain_file_batches
from iceberg_catalog.tables import check_location, open_catalog


@dataclass(frozen=True)
class ScanSlice:
    """Some data files of one table at one snapshot, with a row filter and the columns to read. Small and
    picklable: a plan cuts a partition into slices, tasks read them (`Lakehouse.read_slice`)."""

    table: str
    snapshot_id: int
    files: tuple[FileScanTask, ...]
    columns: tuple[str, ...] | None = None
    row_filter: BooleanExpression = AlwaysTrue()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.file.file_path for f in self.files)

    @property
    def max_rows(self) -> int:
        """Rows in the slice's files before the row filter (an upper bound, from the manifests)."""
        return sum(f.file.record_count for f in self.files)


class Lakehouse:
    """A catalog plus the key its commits lock on. `Lakehouse()` is the configured default (embedded SQLite
    under TOKENLAKE_HOME, or `TOKENLAKE_CATALOG`); namespaces and declared tables are created on first use.
    `Lakehouse(catalog=c)` wraps an already opened pyiceberg catalog (configuration read from it)."""

    def __init__(self, config: CatalogConfig | None = None, *, catalog: Catalog | None = None) -> None:
        if config is None and catalog is not None:  # wrapping an opened catalog: its own name and properties
            config = CatalogConfig(catalog.name, dict(catalog.properties))
        self.config = config or CatalogConfig.resolve()
        self._catalog = catalog

    def __getstate__(self) -> dict:
        return {"config": self.config, "_catalog": None}

    def __repr__(self) -> str:
        return f"Lakehouse({self.config.name!r}, uri={redact_uri(str(self.config.properties.get('uri', '')))!r})"

    @property
    def catalog(self) -> Catalog:
        """The opened pyiceberg catalog (every namespace and declared table exists)."""
        if self._catalog is None:
            self._catalog = open_catalog(self.config)
        return self._catalog

    def release(self) -> None:
        """Close the pooled connections of the catalog opened here (a SQL catalog's SQLAlchemy engine) now, not
        when the garbage collector reaches them: a reader that is done with the catalog (a training process that
        opened its run view) holds no database connection. The catalog reconnects if it is used again."""
        engine = getattr(self._catalog, "engine", None)
        if engine is not None:
            engine.dispose()

    @property
    def lock_key(self) -> str:
        """What per-table commit locks are keyed by (never contains secrets)."""
        return self.config.fingerprint()

    def file_io(self, location: str | None = None) -> FileIO:
        """A FileIO for the warehouse, built from the catalog properties (no catalog round trip)."""
        return load_file_io(dict(self.config.properties), location)

    # --- tables and snapshots ---------------------------------------------------------------------------

    def table(self, t: TableDef) -> Table:
        """The table, after checking that its files live under this lakehouse's warehouse."""
        table = self.catalog.load_table(_identifier(t))
        check_location(t, table.location(), self.config.properties.get("warehouse", ""))
        return table

    def snapshot_id(self, t: TableDef) -> int | None:
        """The table's current snapshot id; None when it was never written."""
        snap = self.table(t).current_snapshot()
        return snap.snapshot_id if snap else None

    def snapshot_ids(self, tables: Iterable[TableDef]) -> dict[str, int | None]:
        """Current snapshot id per table identifier: what a step read, for its provenance and its pins."""
        return {t.identifier: self.snapshot_id(t) for t in tables}

    def commit_lock(self, t: TableDef) -> AbstractContextManager[None]:
        """The machine-wide lock that every metadata commit of `t` on this catalog holds."""
        return table_commit_lock(self.lock_key, t.identifier)

    # --- reading ----------------------------------------------------------------------------------------

    def scan_at(
        self,
        t: TableDef,
        snapshot_id: int | None,
        columns: Sequence[str] | None = None,
        row_filter: BooleanExpression | None = None,
    ) -> pa.Table:
        """Rows of `t` at `snapshot_id`; None (the table had no snapshot when pinned) gives an empty table
        with the declared columns."""
        return self.batches_at(t, snapshot_id, columns, row_filter).read_all()

    def scan(
        self, t: TableDef, columns: Sequence[str] | None = None, row_filter: BooleanExpression | None = None
    ) -> pa.Table:
        """Rows of `t` at its current snapshot (empty, typed, when never written)."""
        return self.scan_at(t, self.snapshot_id(t), columns, row_filter)

    def batches_at(
        self,
        t: TableDef,
        snapshot_id: int | None,
        columns: Sequence[str] | None = None,
        row_filter: BooleanExpression | None = None,
    ) -> pa.RecordBatchReader:
        """A streaming reader over `t` at `snapshot_id` (bounded memory); empty when `snapshot_id` is None."""
        if snapshot_id is None:
            schema = t.arrow_schema
            schema = pa.schema([schema.field(c) for c in columns]) if columns else schema
            return pa.RecordBatchReader.from_batches(schema, iter(()))
        from pyiceberg.io.pyarrow import schema_to_pyarrow  # imports pandas: not for every reader

        kwargs = {"selected_fields": tuple(columns)} if columns else {}
        scan = self.table(t).scan(row_filter=row_filter or AlwaysTrue(), snapshot_id=snapshot_id, **kwargs)
        slices = self.slices(t, snapshot_id, row_filter, columns, files_per_slice=None)
        batches = (b for s in slices for b in self.read_slice(s))
        return pa.RecordBatchReader.from_batches(schema_to_pyarrow(scan.projection()), batches)

    def slices(
        self,
        t: TableDef,
        snapshot_id: int | None,
        row_filter: BooleanExpression | None = None,
        columns: Sequence[str] | None = None,
        files_per_slice: int | None = 1,
    ) -> list[ScanSlice]:
        """The data files of `t` at `snapshot_id` matching `row_filter` (pruned by partition values and column
        statistics), cut into slices of `files_per_slice` files in scan order (the order a single scan would
        read them); `files_per_slice=None` puts them all in one slice (none when no file matches)."""
        if snapshot_id is None:
            return []
        if files_per_slice is not None and files_per_slice < 1:
            raise ValueError(f"files_per_slice must be >= 1, got {files_per_slice}")
        where = row_filter or AlwaysTrue()
        tasks = list(self.table(t).scan(row_filter=where, snapshot_id=snapshot_id).plan_files())
        cols = tuple(columns) if columns else None
        step = files_per_slice or max(1, len(tasks))
        return [
            ScanSlice(t.identifier, snapshot_id, tuple(tasks[i : i + step]), cols, where)
            for i in range(0, len(tasks), step)
        ]

    def crawl_fingerprints(self, snapshots: Mapping[TableDef, int | None]) -> dict[str, str]:
        """Per crawl, the sha256 of the data and delete files of that crawl in each table at its snapshot (from
        the scan plan, nothing read): a re-materialised or erased partition writes new files, so its crawl's
        fingerprint changes, and one that did not change keeps it. What incremental global steps compare."""
        files: dict[str, list[str]] = {}
        for t, snapshot_id in snapshots.items():
            where = t.partition_by.index("crawl")
            for s in self.slices(t, snapshot_id, files_per_slice=None):
                for f in s.files:
                    names = [f"{f.file.file_path} {f.file.record_count}", *(d.file_path for d in f.delete_files)]
                    files.setdefault(str(f.file.partition[where]), []).extend(names)
        return {c: hashlib.sha256("\n".join(sorted(n)).encode()).hexdigest() for c, n in sorted(files.items())}

    def stored_crawls(self, t: TableDef, snapshot_id: int | None) -> set[str]:
        """The crawls with data files in `t` (partitioned by crawl) at `snapshot_id`, from the scan plan."""
        files = (f.file for s in self.slices(t, snapshot_id, files_per_slice=None) for f in s.files)
        return {str(f.partition[t.partition_by.index("crawl")]) for f in files if len(f.partition)}

    def read_slice(self, s: ScanSlice, batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """Stream the rows of one slice (projected to its columns, filtered by its row filter), file by file, at
        most `batch_rows` rows of a plain file in memory at a time (`iceberg_catalog.stream`)."""
        from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow  # imports pandas: not for every reader

        kwargs = {"selected_fields": s.columns} if s.columns else {}
        scan = self.table(TABLES[s.table]).scan(row_filter=s.row_filter, snapshot_id=s.snapshot_id, **kwargs)
        projected, schema = scan.projection(), scan.table_metadata.schema()
        target = schema_to_pyarrow(projected)
        for task in s.files:
            batches = plain_file_batches(scan.io, task, schema, projected, scan.row_filter, target, batch_rows)
            if batches is None:  # delete files or an evolved schema: pyiceberg's general path
                scan_ = ArrowScan(scan.table_metadata, scan.io, projected, scan.row_filter)
                batches = (b.cast(target) if b.schema != target else b for b in scan_.to_record_batches([task]))
            yield from batches

    # --- writing ----------------------------------------------------------------------------------------

    def writer(self, t: TableDef, partition: Mapping[str, str], **kwargs) -> PartitionWriter:
        """A streaming writer that replaces exactly `partition` of `t` on commit (one Iceberg transaction)."""
        self.table(t)  # the location guard, before anything is written
        return PartitionWriter(self.catalog, t.identifier, partition, catalog_fingerprint=self.lock_key, **kwargs)

    def output(self, t: TableDef, partition: Mapping[str, str], run: str, task_index: int) -> TaskOutput:
        """Where task `task_index` of a plan (`run`: one id per plan) writes its files for `partition` of `t`."""
        return task_output(self.table(t), partition, run, task_index, self.config.properties)

    def commit(
        self,
        results: Iterable[TaskResult],
        partitions: Mapping[TableDef, Mapping[str, str]],
        provenance: Mapping[TableDef, Provenance],
    ) -> dict[TableDef, CommitResult]:
        """Per table, ONE transaction replacing exactly its partition with every task's files in task order."""
        done = commit_results(
            self.catalog,
            list(results),
            {t.identifier: [p] for t, p in partitions.items()},
            {t.identifier: provenance[t] for t in partitions},
            catalog_fingerprint=self.lock_key,
        )
        return {t: done[t.identifier] for t in partitions}

    def commit_partitions(
        self,
        t: TableDef,
        partitions: Sequence[Mapping[str, str]],
        results: Iterable[TaskResult],
        provenance: Provenance,
    ) -> CommitResult:
        """ONE transaction replacing exactly `partitions` of `t` (none, one or several) with every task's files
        in task order; each file must belong to one of them, and every other partition keeps its files."""
        done = commit_results(
            self.catalog,
            list(results),
            {t.identifier: list(partitions)},
            {t.identifier: provenance},
            catalog_fingerprint=self.lock_key,
        )
        return done[t.identifier]


def first_changed_crawl(
    recorded: Mapping[str, str] | None, current: Mapping[str, str], stored: Iterable[str] = ()
) -> str | None:
    """The earliest crawl an incremental global step must recompute from (a row of crawl k depends only on crawls
    <= k): the earliest whose fingerprint (`Lakehouse.crawl_fingerprints`) differs from the `recorded` one (added,
    rewritten or gone); without a usable record, the earliest crawl of `current` and `stored` (the output's own
    crawls); None when nothing changed."""
    if recorded is None:
        return min({*current, *stored}, default=None)
    return min((c for c in {*recorded, *current} if recorded.get(c) != current.get(c)), default=None)


def _identifier(t: TableDef) -> str:
    if not isinstance(t, TableDef):
        raise TypeError(f"tables are named by their TableDef (iceberg_catalog.schemas), got {t!r}")
    return t.identifier
