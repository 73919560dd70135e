"""The one commit helper: replace exactly one partition atomically, with provenance on the snapshot.

Data is streamed: `PartitionWriter.write()` turns Arrow batches into Parquet data files under the table's
location as they arrive (bounded memory), and `commit()` swaps them in with one Iceberg transaction
(`delete(partition)` + `add_files`). Re-materialising a partition therefore never duplicates rows, and a
failed run leaves the table as it was (its unreferenced files are swept by maintenance).

SQLite catalogs lose commits under contention, so committers are serialised per table: a Dagster pool per
table at the step level, an OS file lock around the commit itself, and retries on commit conflicts on top of
pyiceberg 0.12's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import random
import tempfile
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table

from iceberg_catalog.schemas import TABLES, TableDef

log = logging.getLogger(__name__)

PROPERTY_PREFIX = "tokenlake."


def config_hash(config: Mapping[str, object]) -> str:
    """sha256 of the canonical JSON of a configuration mapping (key order and whitespace do not matter)."""
    blob = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class Provenance:
    """What every snapshot written by the pipeline records about how it was made."""

    asset_key: str
    partition_key: str | None
    run_id: str
    code_version: str
    config_hash: str
    upstream_snapshot_ids: Mapping[str, int | None] = field(default_factory=dict)
    extra: Mapping[str, str] = field(default_factory=dict)

    def snapshot_properties(self) -> dict[str, str]:
        props = {
            "asset-key": self.asset_key,
            "partition-key": self.partition_key or "",
            "dagster-run-id": self.run_id,
            "code-version": self.code_version,
            "config-hash": self.config_hash,
            "upstream-snapshot-ids": json.dumps(dict(self.upstream_snapshot_ids), sort_keys=True),
            **self.extra,
        }
        return {PROPERTY_PREFIX + k: str(v) for k, v in props.items()}

    @staticmethod
    def from_snapshot_summary(summary: Mapping[str, str]) -> dict[str, str]:
        """The tokenlake provenance fields of a snapshot summary, prefix removed."""
        return {k[len(PROPERTY_PREFIX) :]: v for k, v in summary.items() if k.startswith(PROPERTY_PREFIX)}


@dataclass(frozen=True)
class CommitResult:
    table: str
    snapshot_id: int | None
    rows: int
    files: int
    attempts: int


def partition_filter(partition: Mapping[str, str]) -> BooleanExpression:
    """An exact-match predicate over identity-partition columns."""
    expr: BooleanExpression = AlwaysTrue()
    for column, value in sorted(partition.items()):
        expr = EqualTo(column, value) if isinstance(expr, AlwaysTrue) else And(expr, EqualTo(column, value))
    return expr


@contextmanager
def table_commit_lock(catalog_fingerprint: str, identifier: str) -> Iterator[None]:
    """A machine-wide exclusive lock per (catalog, table), held only around the metadata commit."""
    key = hashlib.sha256(f"{catalog_fingerprint}|{identifier}".encode()).hexdigest()[:24]
    lock_dir = Path(tempfile.gettempdir()) / "tokenlake-locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{key}.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class PartitionWriter:
    """Stream Arrow batches of one partition into Parquet data files, then commit them as the partition.

    Usage: `w = PartitionWriter(catalog, "raw.warc_records", {"crawl": c, "segment": s})`, `w.write(batch)`
    any number of times, then `w.commit(provenance)`. Every row must belong to the partition.
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        partition: Mapping[str, str],
        *,
        catalog_fingerprint: str = "",
        target_file_bytes: int = 256 << 20,
        row_group_rows: int | None = None,
        max_attempts: int = 8,
    ) -> None:
        self.table_def: TableDef = TABLES[identifier]
        missing = set(self.table_def.partition_by) - set(partition)
        if missing or set(partition) - set(self.table_def.partition_by):
            raise ValueError(
                f"{identifier} is partitioned by {self.table_def.partition_by}; got partition {dict(partition)!r}"
            )
        self.catalog = catalog
        self.identifier = identifier
        self.partition = dict(partition)
        self.catalog_fingerprint = catalog_fingerprint
        self.target_file_bytes = target_file_bytes
        self.row_group_rows = row_group_rows
        self.max_attempts = max_attempts
        self.table: Table = catalog.load_table(identifier)
        # written with the catalog's schema: its field ids are what readers resolve columns by
        self.schema = schema_to_pyarrow(self.table.schema())
        self.paths: list[str] = []
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None
        self._stream = None
        self._file_bytes = 0
        self._run_uuid = uuid.uuid4().hex

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Append rows to the current data file (a new file starts past `target_file_bytes`)."""
        if data.num_rows == 0:
            return
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        table = self._conform(table)
        if self._writer is None:
            self._open_file()
        self._writer.write_table(table, row_group_size=self.row_group_rows)
        self.rows += table.num_rows
        self._file_bytes += table.nbytes
        if self._file_bytes >= self.target_file_bytes:
            self._close_file()

    def _conform(self, table: pa.Table) -> pa.Table:
        """Cast to the declared schema (field ids, nullability) and check the partition columns."""
        try:
            table = table.select(self.schema.names).cast(self.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
            raise ValueError(
                f"batch for {self.identifier} does not match its declared schema: {exc}; "
                f"batch columns {table.column_names}, declared {self.schema.names}"
            ) from exc
        for column, value in self.partition.items():
            bad = pc.sum(pc.invert(pc.equal(table[column], value))).as_py() or 0
            if bad:
                others = pc.unique(table[column]).to_pylist()[:5]
                raise ValueError(
                    f"{bad} rows for {self.identifier} have {column} in {others}, outside partition {column}={value!r}"
                )
        return table

    def _open_file(self) -> None:
        location = self.table.location().rstrip("/")
        name = "-".join(f"{k}={v}".replace("/", "_") for k, v in sorted(self.partition.items()))
        path = f"{location}/data/{name}/{self._run_uuid}-{len(self.paths):05d}.parquet"
        self._stream = self.table.io.new_output(path).create(overwrite=False)
        self._writer = pq.ParquetWriter(self._stream, self.schema, compression="zstd")
        self.paths.append(path)
        self._file_bytes = 0

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
            self._writer = None
            self._stream = None

    def commit(self, provenance: Provenance) -> CommitResult:
        """Atomically replace the partition's rows with what was written (an empty partition is valid)."""
        self._close_file()
        props = provenance.snapshot_properties()
        predicate = partition_filter(self.partition)
        attempts = 0
        while True:
            attempts += 1
            try:
                with table_commit_lock(self.catalog_fingerprint, self.identifier):
                    table = self.catalog.load_table(self.identifier)
                    with table.transaction() as tx, warnings.catch_warnings():
                        # "Delete operation did not match any records" on a first materialisation is expected.
                        warnings.filterwarnings("ignore", message="Delete operation did not match")
                        tx.delete(predicate, snapshot_properties=props)
                        if self.paths:
                            tx.add_files(self.paths, snapshot_properties=props, check_duplicate_files=False)
                        else:
                            # an empty partition still leaves a snapshot: every materialisation is on record
                            tx.append(self.schema.empty_table(), snapshot_properties=props)
                    table = self.catalog.load_table(self.identifier)
                break
            except CommitFailedException as exc:
                if attempts >= self.max_attempts:
                    raise CommitFailedException(
                        f"gave up committing partition {self.partition} of {self.identifier} after {attempts} "
                        f"attempts: {exc}"
                    ) from exc
                delay = min(30.0, 0.2 * 2**attempts) * (0.5 + random.random())
                log.warning("commit conflict on %s (attempt %d), retrying in %.1fs: %s", self.identifier, attempts, delay, exc)
                time.sleep(delay)
        snap = table.current_snapshot()
        return CommitResult(self.identifier, snap.snapshot_id if snap else None, self.rows, len(self.paths), attempts)


def overwrite_partition(
    catalog: Catalog,
    identifier: str,
    partition: Mapping[str, str],
    batches: Iterable[pa.RecordBatch | pa.Table],
    provenance: Provenance,
    *,
    catalog_fingerprint: str = "",
) -> CommitResult:
    """Replace one partition of `identifier` with `batches` in a single provenance-carrying commit."""
    writer = PartitionWriter(catalog, identifier, partition, catalog_fingerprint=catalog_fingerprint)
    for batch in batches:
        writer.write(batch)
    return writer.commit(provenance)
