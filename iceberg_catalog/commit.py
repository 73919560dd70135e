"""The one commit helper: replace exactly one partition atomically (or several at once, `commit_partitions`:
a step that recomputes some partitions of a table), with provenance on the snapshot.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, Or
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table import Table

from iceberg_catalog.catalog import restored
from iceberg_catalog.credentials import portable, same_warehouse
from iceberg_catalog.schemas import TABLES, TableDef
from iceberg_catalog.transaction import transaction

log = logging.getLogger(__name__)

PROPERTY_PREFIX = "tokenlake."
# tokenlake.policy-version: every policy version (`<kind>/<version>`, sorted, comma-joined) a snapshot was written
# under: the writer's own (Provenance.extra) and those of the upstream snapshots it read (commit_partition).
POLICY_VERSION = "policy-version"
CARRIED_POLICY_VERSIONS = "partition-policy-versions"  # on deletion snapshots: {partitions: {key: versions}, ...}


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


def join_policy_versions(own: str | None, inherited: Iterable[str]) -> str:
    """`kind/version` labels sorted and comma-joined; a kind the writer names itself replaces the inherited
    versions of that kind (the writer decided under it)."""
    mine = {x for x in (own or "").split(",") if x}
    kinds = {x.split("/")[0] for x in mine}
    return ",".join(sorted(mine | {x for x in inherited if x and x.split("/")[0] not in kinds}))


def policy_versions_by_partition(table: Table, snapshot_id: int | None) -> tuple[dict[str, str], set[str]]:
    """Walking back from `snapshot_id`: per partition key the policy versions of the newest pipeline snapshot
    that wrote it, and the versions of the deletion snapshots on the way. A deletion snapshot carries the map of
    what it kept (CARRIED_POLICY_VERSIONS: the snapshots before it are expired by the deletion), so the walk
    ends there."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    latest: dict[str, str] = {}
    deletions: set[str] = set()
    snap = by_id.get(snapshot_id) if snapshot_id is not None else None
    while snap is not None:
        props = Provenance.from_snapshot_summary(snap.summary.additional_properties if snap.summary else {})
        if "deletion-request-id" in props:
            deletions.add(props.get(POLICY_VERSION, ""))
            if CARRIED_POLICY_VERSIONS in props:
                carried = json.loads(props[CARRIED_POLICY_VERSIONS])
                for key, value in carried["partitions"].items():
                    latest.setdefault(key, value)
                deletions |= set(carried["deletions"])
                break
        elif "asset-key" in props:
            latest.setdefault(props.get("partition-key", ""), props.get(POLICY_VERSION, ""))
        snap = by_id.get(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    return latest, {d for d in deletions if d}


def carried_policy_versions(table: Table) -> dict[str, str]:
    """The snapshot property a deletion commit of `table` carries: the policy versions of what it keeps."""
    snap = table.current_snapshot()
    latest, deletions = policy_versions_by_partition(table, snap.snapshot_id if snap else None)
    blob = json.dumps({"partitions": latest, "deletions": sorted(deletions)}, sort_keys=True)
    return {PROPERTY_PREFIX + CARRIED_POLICY_VERSIONS: blob}


def inherited_policy_versions(catalog: Catalog, provenance: Provenance) -> set[str]:
    """The policy versions on what a write read: per upstream table at the pinned snapshot, those of each
    partition (only the partitions that this write's partition key names, when the upstream has such a
    partition) and of every deletion (`policy_versions_by_partition`)."""
    own = provenance.partition_key or ""
    own_parts = {own, *own.split("|")}
    out: set[str] = set()
    for ident, sid in sorted(provenance.upstream_snapshot_ids.items()):
        if sid is None or ident not in TABLES:
            continue
        latest, deletions = policy_versions_by_partition(catalog.load_table(ident), sid)
        relevant = [v for k, v in latest.items() if k in own_parts] or list(latest.values())
        out |= {x for v in [*relevant, *deletions] for x in v.split(",") if x}
    return out


def partition_filter(partition: Mapping[str, str]) -> BooleanExpression:
    """An exact-match predicate over identity-partition columns."""
    expr: BooleanExpression = AlwaysTrue()
    for column, value in sorted(partition.items()):
        expr = EqualTo(column, value) if isinstance(expr, AlwaysTrue) else And(expr, EqualTo(column, value))
    return expr


def _needs_os_lock(catalog_fingerprint: str) -> bool:
    """True unless the fingerprint (`CatalogConfig.fingerprint`) names a catalog that is not SQLite."""
    try:
        uri = str(json.loads(catalog_fingerprint).get("uri", ""))
    except (ValueError, AttributeError):
        return True  # not a catalog fingerprint: lock, to be safe
    return not uri or uri.startswith("sqlite")


@contextmanager
def table_commit_lock(catalog_fingerprint: str, identifier: str) -> Iterator[None]:
    """A machine-wide exclusive lock per (catalog, table), held only around the metadata commit, for SQLite
    catalogs (which lose commits under contention). PostgreSQL and REST catalogs detect a conflicting commit
    themselves (`CommitFailedException`, retried by the committer), across machines: no lock is taken."""
    if not _needs_os_lock(catalog_fingerprint):
        yield
        return
    key = hashlib.sha256(f"{catalog_fingerprint}|{identifier}".encode()).hexdigest()[:24]
    lock_dir = Path(tempfile.gettempdir()) / "tokenlake-locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{key}.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass(frozen=True)
class TaskOutput:
    """Where one task writes one table's data files: under the table's location, in the partition's folder,
    named `<run>-<task index>-<file>-<attempt>` so that path order is plan order whatever ran first, and a
    retried task never collides with the files of an earlier attempt. Picklable."""

    table: str
    location: str
    partition: Mapping[str, str]
    run: str
    task_index: int
    io_properties: Mapping[str, str] = field(default_factory=dict)

    def __reduce__(self):
        """Pickled without secrets; the unpickling process takes them from its own configuration when it has
        the same warehouse, else S3's credential chain (`iceberg_catalog.credentials`)."""
        public, removed = portable(self.io_properties)
        args = (self.table, self.location, dict(self.partition), self.run, self.task_index, public, removed)
        return (_unpickle_output, args)

    def path(self, n: int, attempt: str) -> str:
        name = "-".join(f"{k}={v}".replace("/", "_") for k, v in sorted(self.partition.items())) or "all"
        return f"{self.location.rstrip('/')}/data/{name}/{self.run}-{self.task_index:05d}-{n:05d}-{attempt}.parquet"


@dataclass(frozen=True)
class WrittenFiles:
    """Data files a task wrote for one table partition (not yet visible: only a commit makes them so)."""

    table: str
    partition: Mapping[str, str]
    task_index: int
    paths: tuple[str, ...]
    rows: int


@dataclass(frozen=True)
class TaskResult:
    """What `run_task` returns: the files it wrote per table, and its stats (plain, JSON-able values)."""

    task_index: int
    files: tuple[WrittenFiles, ...] = ()
    stats: Mapping[str, object] = field(default_factory=dict)


class FileWriter:
    """Stream Arrow batches of one partition into Parquet data files at a `TaskOutput` (no catalog needed).

    Rows are cast to the declared schema (its field ids are what readers resolve columns by; `ensure_tables`
    refuses a catalog table that drifted from it) and must all belong to the partition."""

    def __init__(
        self,
        output: TaskOutput,
        *,
        target_file_bytes: int = 256 << 20,
        row_group_rows: int | None = None,
        io: FileIO | None = None,
    ) -> None:
        table_def: TableDef = TABLES[output.table]
        partition = dict(output.partition)
        if set(partition) != set(table_def.partition_by):
            raise ValueError(f"{output.table} is partitioned by {table_def.partition_by}; got partition {partition!r}")
        self.output = output
        self.identifier = output.table
        self.partition = partition
        self.schema = table_def.arrow_schema
        self.target_file_bytes = target_file_bytes
        self.row_group_rows = row_group_rows
        self.io = io or load_file_io(dict(output.io_properties), output.location)
        self.paths: list[str] = []
        self.rows = 0
        self._attempt = uuid.uuid4().hex[:8]
        self._writer: pq.ParquetWriter | None = None
        self._stream = None
        self._file_bytes = 0

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
        try:
            table = table.select(self.schema.names).cast(self.schema)
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as exc:
            raise ValueError(
                f"batch for {self.identifier} does not match its declared schema: {exc}; "
                f"batch columns {table.column_names}, declared {self.schema.names}"
            ) from exc
        import pyarrow.compute as pc  # here, not at import: ~0.1 s that the training-side loader never needs

        for column, value in self.partition.items():
            bad = pc.sum(pc.invert(pc.equal(table[column], value))).as_py() or 0
            if bad:
                others = pc.unique(table[column]).to_pylist()[:5]
                raise ValueError(
                    f"{bad} rows for {self.identifier} have {column} in {others}, outside partition {column}={value!r}"
                )
        return table

    def _open_file(self) -> None:
        path = self.output.path(len(self.paths), self._attempt)
        self._stream = self.io.new_output(path).create(overwrite=False)
        self._writer = pq.ParquetWriter(self._stream, self.schema, **parquet_options(TABLES[self.identifier]))
        self.paths.append(path)
        self._file_bytes = 0

    def _close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._stream.close()
            self._writer = None
            self._stream = None

    def close(self) -> WrittenFiles:
        """Finish the last file; what was written, for the commit."""
        self._close_file()
        return WrittenFiles(self.identifier, self.partition, self.output.task_index, tuple(self.paths), self.rows)


def parquet_options(table_def: TableDef) -> dict:
    """ParquetWriter options of a table: zstd, dictionary pages; the columns its `tokenlake.parquet.raw-columns`
    property names (comma-separated) are written plain and uncompressed instead (token arrays: near-random ids
    that zstd shrinks ~25% at 3x the decode time on the loader's hot path)."""
    raw = {c for c in table_def.properties.get(PROPERTY_PREFIX + "parquet.raw-columns", "").split(",") if c}
    if not raw:
        return {"compression": "zstd"}
    names = [f.name for f in table_def.schema.fields]
    return {
        "compression": {n: "none" if n in raw else "zstd" for n in names},
        "use_dictionary": [n for n in names if n not in raw],
    }


def _unpickle_output(table, location, partition, run, task_index, public, removed) -> TaskOutput:
    properties, _ = restored(public, removed, same_warehouse(location))
    return TaskOutput(table, location, partition, run, task_index, properties)


def task_output(
    table: Table,
    partition: Mapping[str, str],
    run: str,
    task_index: int,
    io_properties: Mapping[str, str] | None = None,
) -> TaskOutput:
    """The output of task `task_index` of run `run` for one partition of `table`."""
    identifier = ".".join(table.name()[-2:])
    return TaskOutput(
        identifier,
        table.location(),
        dict(partition),
        run,
        task_index,
        dict(io_properties if io_properties is not None else table.io.properties),
    )


def back_off(
    exc: CommitFailedException,
    attempts: int,
    max_attempts: int,
    what: str,
    identifier: str,
    *,
    base_s: float,
    cap_s: float,
) -> None:
    """After commit conflict `exc` on attempt `attempts` of `what`: give up at `max_attempts`, else sleep a capped
    exponential backoff with jitter (committers that collided spread out instead of colliding again)."""
    if attempts >= max_attempts:
        raise CommitFailedException(f"gave up {what} after {attempts} attempts: {exc}") from exc
    delay = min(cap_s, base_s * 2**attempts) * (0.5 + random.random())
    log.warning("commit conflict on %s (attempt %d), retrying in %.1fs: %s", identifier, attempts, delay, exc)
    time.sleep(delay)


def commit_partition(
    catalog: Catalog,
    identifier: str,
    partition: Mapping[str, str],
    paths: Sequence[str],
    provenance: Provenance,
    **options,
) -> CommitResult:
    """Atomically replace `partition` of `identifier` with the data files `paths` (in that order), in ONE
    Iceberg transaction carrying the provenance properties; an empty list leaves an empty partition. `options`:
    those of `commit_partitions` (catalog_fingerprint, rows, max_attempts)."""
    return commit_partitions(catalog, identifier, [partition], paths, provenance, **options)


def commit_partitions(
    catalog: Catalog,
    identifier: str,
    partitions: Sequence[Mapping[str, str]],
    paths: Sequence[str],
    provenance: Provenance,
    *,
    catalog_fingerprint: str = "",
    rows: int = 0,
    max_attempts: int = 8,
) -> CommitResult:
    """Atomically replace every partition in `partitions` (none, one or several) of `identifier` with the data
    files `paths` (in that order), in ONE Iceberg transaction carrying the provenance properties; every other
    partition keeps its files. With no files the partitions are left empty, and the snapshot is still made."""
    table_def = TABLES[identifier]
    for partition in partitions:
        if set(partition) != set(table_def.partition_by):
            raise ValueError(
                f"{identifier} is partitioned by {table_def.partition_by}; got partition {dict(partition)!r}"
            )
    props = provenance.snapshot_properties()
    versions = join_policy_versions(
        provenance.extra.get(POLICY_VERSION), inherited_policy_versions(catalog, provenance)
    )
    if versions:
        props[PROPERTY_PREFIX + POLICY_VERSION] = versions
    predicates = [partition_filter(p) for p in partitions]
    attempts = 0
    while True:
        attempts += 1
        try:
            with table_commit_lock(catalog_fingerprint, identifier):
                table = catalog.load_table(identifier)
                with transaction(table) as tx, warnings.catch_warnings():
                    # "Delete operation did not match any records" on a first materialisation is expected.
                    warnings.filterwarnings("ignore", message="Delete operation did not match")
                    if predicates:
                        tx.delete(reduce(Or, predicates), snapshot_properties=props)
                    if paths:
                        tx.add_files(list(paths), snapshot_properties=props, check_duplicate_files=False)
                    else:
                        # an empty partition still leaves a snapshot: every materialisation is on record
                        from pyiceberg.io.pyarrow import schema_to_pyarrow  # imports pandas: only here

                        tx.append(schema_to_pyarrow(table.schema()).empty_table(), snapshot_properties=props)
                table = catalog.load_table(identifier)
            break
        except CommitFailedException as exc:
            what = f"committing partitions {[dict(p) for p in partitions]} of {identifier}"
            back_off(exc, attempts, max_attempts, what, identifier, base_s=0.2, cap_s=30.0)
    snap = table.current_snapshot()
    return CommitResult(identifier, snap.snapshot_id if snap else None, rows, len(paths), attempts)


def commit_results(
    catalog: Catalog,
    results: Iterable[TaskResult],
    expected: Mapping[str, Sequence[Mapping[str, str]]],
    provenance: Mapping[str, Provenance],
    *,
    catalog_fingerprint: str = "",
) -> dict[str, CommitResult]:
    """Commit every task's files: per table of `expected` ({identifier: [partition, ...]}), one transaction that
    replaces exactly those partitions with the files of all tasks in task-index order, so the table does not
    depend on the order tasks finished in or on how the plan grouped them."""
    by_table: dict[str, list[WrittenFiles]] = {ident: [] for ident in expected}
    for result in results:
        for written in result.files:
            if written.table not in by_table:
                raise ValueError(f"task {result.task_index} wrote {written.table}, not one of {sorted(by_table)}")
            replaced = [dict(p) for p in expected[written.table]]
            if dict(written.partition) not in replaced:
                what = replaced[0] if len(replaced) == 1 else replaced
                raise ValueError(
                    f"task {result.task_index} wrote partition {dict(written.partition)} of "
                    f"{written.table}; this commit replaces {what}"
                )
            by_table[written.table].append(written)
    out = {}
    for ident, written in by_table.items():
        written.sort(key=lambda w: w.task_index)
        paths = [p for w in written for p in w.paths]
        out[ident] = commit_partitions(
            catalog,
            ident,
            expected[ident],
            paths,
            provenance[ident],
            catalog_fingerprint=catalog_fingerprint,
            rows=sum(w.rows for w in written),
        )
    return out


class PartitionWriter:
    """Stream Arrow batches of one partition into data files, then commit them as the partition, in one
    process: `w = lakehouse.writer(RAW_WARC_RECORDS, {"crawl": c, "segment": s})`, `w.write(batch)` any
    number of times, then `w.commit(provenance)`. Every row must belong to the partition."""

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
        if identifier not in TABLES:
            raise KeyError(f"unknown table {identifier!r}; declared tables: {sorted(TABLES)}")
        self.catalog = catalog
        self.identifier = identifier
        self.catalog_fingerprint = catalog_fingerprint
        self.max_attempts = max_attempts
        table = catalog.load_table(identifier)
        self._files = FileWriter(
            task_output(table, partition, uuid.uuid4().hex, 0),
            target_file_bytes=target_file_bytes,
            row_group_rows=row_group_rows,
            io=table.io,
        )
        self.partition = self._files.partition
        self.schema = self._files.schema

    @property
    def paths(self) -> list[str]:
        return self._files.paths

    @property
    def rows(self) -> int:
        return self._files.rows

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Append rows to the current data file (a new file starts past `target_file_bytes`)."""
        self._files.write(data)

    def commit(self, provenance: Provenance) -> CommitResult:
        """Atomically replace the partition's rows with what was written (an empty partition is valid)."""
        written = self._files.close()
        return commit_partition(
            self.catalog,
            self.identifier,
            self.partition,
            written.paths,
            provenance,
            catalog_fingerprint=self.catalog_fingerprint,
            rows=written.rows,
            max_attempts=self.max_attempts,
        )
