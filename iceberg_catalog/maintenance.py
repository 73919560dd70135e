"""Physical erasure and its proof: row deletes, ref removal, snapshot expiry, an orphan-file sweep.

pyiceberg 0.12 deletes logically: `delete()` writes a new snapshot, old snapshots (and tags) still read the
rows, `expire_snapshots` drops snapshot metadata but deletes no file, and nothing removes orphan files. Here
is the rest, in the order `erase_rows` runs it:

1. `delete_rows`: copy-on-write, but each rewritten file keeps its row-group boundaries (the loader
   block-shuffles whole row groups; pyiceberg's own delete would merge them into one).
2. `drop_delete_manifests`: a file-less snapshot that leaves out manifests holding only DELETED entries,
   since those still carry the removed files' column bounds (the first 16 characters of min/max values).
3. `remove_refs`, then `expire_snapshots`: no snapshot that still reads the rows stays reachable.
4. `sweep_orphan_files`: deletes every file under the table's location that no retained snapshot reads.
5. The proof: `count_matching_in_retained_snapshots` (a real scan of every retained snapshot) and
   `find_bytes_in_files` (raw bytes plus decoded Parquet values and decompressed Avro blocks on disk).

The API is per pyiceberg `Table` (`lakehouse.table(T)`); every step holds `commit.table_commit_lock`, the
lock `PartitionWriter` commits under, keyed by `catalog_fingerprint` (pass `Lakehouse.lock_key`), so no
pipeline commit lands between the sweep reading the references and deleting. A writer's files exist before its
commit, though, so the sweep tells two kinds of unreferenced file apart: a file some snapshot in the
metadata log once referenced (an expired snapshot's data, manifests, manifest list) was committed and goes
at once; a file no snapshot ever referenced may belong to a writer about to commit and goes only once it is
`uncommitted_min_age_seconds` old (default one day; pass 0 when no writer can be running).
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyarrow import fs as pafs
from pyiceberg.avro.codecs import KNOWN_CODECS
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.expressions import BooleanExpression
from pyiceberg.expressions.parser import parse as parse_row_filter
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.io.pyarrow import (
    PyArrowFileIO,
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    expression_to_pyarrow,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import Table
from pyiceberg.table.refs import MAIN_BRANCH, SnapshotRefType
from pyiceberg.table.snapshots import ancestors_of

from iceberg_catalog.commit import back_off, table_commit_lock
from iceberg_catalog.transaction import transaction

log = logging.getLogger(__name__)

T = TypeVar("T")

# An unreferenced file that no snapshot ever referenced may be a running writer's (its data files, or the
# manifests and metadata JSON of a commit in flight): removed only once older than the longest such write.
UNCOMMITTED_MIN_AGE_SECONDS = 24 * 3600.0

_FIELD_ID_KEY = b"PARQUET:field_id"


# --------------------------------------------------------------------------------------------- commits


def table_identifier(table: Table) -> str:
    """`namespace.name`, the identifier the commit lock is keyed by (as in `PartitionWriter`)."""
    return ".".join(table.name())


def _locked(table: Table, catalog_fingerprint: str, action: Callable[[Table], T], max_attempts: int = 6) -> T:
    """Run `action` on the freshly refreshed table under the table's commit lock, retrying commit conflicts
    (a committer that does not take the lock can still move the table under us)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            with table_commit_lock(catalog_fingerprint, table_identifier(table)):
                table.refresh()
                return action(table)
        except CommitFailedException as exc:
            identifier = table_identifier(table)
            back_off(exc, attempts, max_attempts, f"on maintenance of {identifier}", identifier, base_s=0.1, cap_s=10.0)


def _as_expression(row_filter: str | BooleanExpression) -> BooleanExpression:
    if isinstance(row_filter, str):
        return parse_row_filter(row_filter)
    if isinstance(row_filter, BooleanExpression):
        return row_filter
    raise TypeError(f"row_filter must be a pyiceberg expression or a filter string, got {row_filter!r}")


def _check_properties(snapshot_properties: Mapping[str, str]) -> dict[str, str]:
    bad = {k: v for k, v in snapshot_properties.items() if not isinstance(k, str) or not isinstance(v, str)}
    if bad:
        raise ValueError(f"snapshot properties must map str to str; offending entries: {bad!r}")
    return dict(snapshot_properties)


# ---------------------------------------------------------------------------------------- row deletes


@dataclass
class _Rewrite:
    old: DataFile
    new: list[DataFile]
    rows_deleted: int


def _evaluation_table(data: pa.Table, table: Table) -> pa.Table:
    """The file's columns under the table's current names (resolved by field id), plus null columns for
    fields the file predates, so the filter sees what a scan would see."""
    current = {f.field_id: f.name for f in table.schema().fields}
    names = []
    for f in data.schema:
        fid = (f.metadata or {}).get(_FIELD_ID_KEY)
        names.append(current.get(int(fid), f.name) if fid is not None else f.name)
    out = data.rename_columns(names)
    arrow = schema_to_pyarrow(table.schema())
    for f in arrow:
        if f.name not in out.column_names:
            out = out.append_column(pa.field(f.name, f.type, nullable=True), pa.nulls(out.num_rows, f.type))
    return out


def _keep_masks(pf: pq.ParquetFile, table: Table, keep: pc.Expression, field_ids: set[int]) -> list[pa.Array]:
    """Per row group, which rows to keep; reads only the columns the filter names."""
    columns = [f.name for f in pf.schema_arrow if int((f.metadata or {}).get(_FIELD_ID_KEY, -1)) in field_ids]
    masks = []
    for i in range(pf.num_row_groups):
        group = _evaluation_table(pf.read_row_group(i, columns=columns), table)
        masks.append(ds.dataset(group).to_table(columns={"keep": keep})["keep"].combine_chunks())
    return masks


def _rewrite_file(
    table: Table, data_file: DataFile, keep: pc.Expression, field_ids: set[int], commit_uuid: str, n: int
) -> _Rewrite:
    """Drop the matching rows of one data file, row group by row group, so the new file keeps the old
    row-group boundaries (an emptied row group disappears); memory is bounded by one row group."""
    with table.io.new_input(data_file.file_path).open() as stream:
        pf = pq.ParquetFile(stream)
        masks = _keep_masks(pf, table, keep, field_ids)
        kept = sum(pc.sum(m).as_py() or 0 for m in masks)
        deleted = sum(len(m) for m in masks) - kept
        if deleted == 0 or kept == 0:
            return _Rewrite(data_file, [], deleted)
        compression = pf.metadata.row_group(0).column(0).compression.lower()
        directory = data_file.file_path.rsplit("/", 1)[0]
        path = f"{directory}/{commit_uuid}-erased-{n:05d}.parquet"
        with table.io.new_output(path).create(overwrite=False) as out:
            with pq.ParquetWriter(out, pf.schema_arrow, compression=compression) as writer:
                for i, mask in enumerate(masks):
                    if pc.any(mask).as_py():
                        group = pf.read_row_group(i).filter(mask)
                        writer.write_table(group, row_group_size=group.num_rows)
    return _Rewrite(data_file, [_data_file(table, path, data_file)], deleted)


def _data_file(table: Table, path: str, like: DataFile) -> DataFile:
    """A DataFile for a rewritten file: statistics from its footer, partition and spec from the original."""
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.read_metadata(stream)
    schema = table.schema()
    stats = data_file_statistics_from_parquet_metadata(
        parquet_metadata=metadata,
        stats_columns=compute_statistics_plan(schema, table.metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=like.partition,
        file_size_in_bytes=len(input_file),
        sort_order_id=like.sort_order_id,
        spec_id=like.spec_id,
        equality_ids=None,
        key_metadata=None,
        **stats.to_serialized_dict(),
    )


def delete_rows(
    table: Table,
    row_filter: str | BooleanExpression,
    snapshot_properties: Mapping[str, str],
    *,
    catalog_fingerprint: str = "",
    case_sensitive: bool = True,
) -> int:
    """Copy-on-write delete of the rows matching `row_filter` from the current snapshot of main, in one
    OVERWRITE snapshot carrying `snapshot_properties`; returns the rows deleted (0: nothing committed)."""
    expr = _as_expression(row_filter)
    props = _check_properties(snapshot_properties)

    def act(t: Table) -> int:
        if t.current_snapshot() is None:
            return 0
        bound = bind(t.schema(), expr, case_sensitive)
        # a row whose filter evaluates to null does not match (as in a scan), so it is kept
        keep = pc.invert(pc.coalesce(expression_to_pyarrow(bound), pc.scalar(False)))
        field_ids = extract_field_ids(bound)
        commit_uuid = uuid.uuid4().hex
        rewrites: list[_Rewrite] = []
        try:
            for task in t.scan(row_filter=expr, case_sensitive=case_sensitive).plan_files():
                if task.delete_files:
                    raise ValueError(
                        f"{task.file.file_path} of {table_identifier(t)} has delete files; rewriting it would "
                        f"resurrect rows they delete (tokenlake writes none: who wrote them?)"
                    )
                rewrite = _rewrite_file(t, task.file, keep, field_ids, commit_uuid, len(rewrites))
                if rewrite.rows_deleted:
                    rewrites.append(rewrite)
            if not rewrites:
                return 0
            with transaction(t) as tx:
                with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
                    for r in rewrites:
                        overwrite.delete_data_file(r.old)
                        for new in r.new:
                            overwrite.append_data_file(new)
        except CommitStateUnknownException:
            raise  # the commit may have landed: its files must stay (a later sweep removes them if not)
        except BaseException:
            for r in rewrites:  # the next attempt rewrites afresh; do not leave these for the sweep
                for new in r.new:
                    _delete_quietly(t, new.file_path)
            raise
        return sum(r.rows_deleted for r in rewrites)

    deleted = _locked(table, catalog_fingerprint, act)
    log.info("deleted %d rows from %s", deleted, table_identifier(table))
    return deleted


def drop_delete_manifests(
    table: Table, snapshot_properties: Mapping[str, str], *, catalog_fingerprint: str = ""
) -> int | None:
    """If the current snapshot lists manifests with only DELETED entries (they keep the removed files'
    column bounds), commit a file-less snapshot without them; returns its id, or None when none were listed."""
    props = _check_properties(snapshot_properties)

    def act(t: Table) -> int | None:
        snap = t.current_snapshot()
        if snap is None:
            return None
        manifests = snap.manifests(t.io)
        delete_only = [m for m in manifests if not m.has_added_files() and not m.has_existing_files()]
        if not delete_only:
            return None
        # a fast append carries over exactly the manifests that have added or existing files
        with transaction(t) as tx:
            with tx.update_snapshot(snapshot_properties=props).fast_append():
                pass
        return t.current_snapshot().snapshot_id

    return _locked(table, catalog_fingerprint, act)


# ------------------------------------------------------------------------------------- refs, snapshots


def remove_refs(table: Table, names: Iterable[str], *, catalog_fingerprint: str = "") -> list[str]:
    """Drop the named tags/branches in one commit; returns the names that existed (absent names are skipped,
    so a rerun is a no-op). The main branch cannot be removed."""
    wanted = sorted(set(names))
    if MAIN_BRANCH in wanted:
        raise ValueError(f"refusing to remove the {MAIN_BRANCH!r} branch of {table_identifier(table)}")

    def act(t: Table) -> list[str]:
        refs = t.refs()
        present = [n for n in wanted if n in refs]
        if present:
            with t.manage_snapshots() as ms:
                for name in present:
                    if refs[name].snapshot_ref_type == SnapshotRefType.TAG:
                        ms.remove_tag(name)
                    else:
                        ms.remove_branch(name)
        return present

    return _locked(table, catalog_fingerprint, act)


def retained_snapshot_ids(table: Table, keep_last: int = 1) -> set[int]:
    """The snapshots `expire_snapshots` keeps: the `keep_last` newest of main's history and every ref head."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 (the current snapshot is always kept), got {keep_last}")
    keep = {ref.snapshot_id for ref in table.refs().values()}
    for i, snap in enumerate(ancestors_of(table.current_snapshot(), table.metadata)):
        if i >= keep_last:
            break
        keep.add(snap.snapshot_id)
    return keep


def expire_snapshots(table: Table, keep_last: int = 1, *, catalog_fingerprint: str = "") -> list[int]:
    """Expire every snapshot except the `keep_last` newest of main and the heads of tags/branches; returns
    the expired ids (sorted). Deletes no file: `sweep_orphan_files` does that."""

    def act(t: Table) -> list[int]:
        keep = retained_snapshot_ids(t, keep_last)
        expired = sorted(s.snapshot_id for s in t.snapshots() if s.snapshot_id not in keep)
        if expired:
            t.maintenance.expire_snapshots().by_ids(expired).commit()
        return expired

    return _locked(table, catalog_fingerprint, act)


# ---------------------------------------------------------------------------------------- orphan files


def _path_key(location: str) -> str:
    """A location without its scheme, as filesystem listings report it (`file:///a/b` -> `/a/b`)."""
    _, _, path = PyArrowFileIO.parse_location(location)
    return path


def _filesystem(table: Table, location: str) -> tuple[pafs.FileSystem, str]:
    scheme, netloc, path = PyArrowFileIO.parse_location(location, table.io.properties)
    if isinstance(table.io, PyArrowFileIO):
        return table.io.fs_by_scheme(scheme, netloc), path
    filesystem, path = pafs.FileSystem.from_uri(location)
    return filesystem, path


def referenced_files(table: Table) -> set[str]:
    """Every file a retained snapshot or the table metadata reads: current metadata JSON and its metadata
    log, manifest lists, manifests, live data/delete files, statistics files."""
    meta = table.metadata
    refs = {table.metadata_location, *(entry.metadata_file for entry in meta.metadata_log)}
    refs.update(s.statistics_path for s in meta.statistics)
    refs.update(s.statistics_path for s in meta.partition_statistics)
    for snap in table.snapshots():
        refs.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            refs.add(manifest.manifest_path)
            # DELETED entries name files this snapshot no longer reads
            refs.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    return refs


def _once_committed_files(table: Table) -> set[str]:
    """Every file a snapshot listed in any metadata file of the metadata log referenced, expired snapshots
    included (their files may already be gone): these were committed, so no writer still owns them."""
    snapshots = {}
    out: set[str] = set()
    for entry in table.metadata.metadata_log:
        try:
            old = FromInputFile.table_metadata(table.io.new_input(entry.metadata_file))
        except FileNotFoundError:
            continue
        out.add(entry.metadata_file)
        snapshots.update({snap.snapshot_id: snap for snap in old.snapshots})
    snapshots.update({snap.snapshot_id: snap for snap in table.snapshots()})
    seen: set[str] = set()
    for snap in snapshots.values():
        out.add(snap.manifest_list)
        try:
            manifests = snap.manifests(table.io)
        except FileNotFoundError:
            continue
        for manifest in manifests:
            out.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            try:
                entries = manifest.fetch_manifest_entry(table.io, discard_deleted=False)
            except FileNotFoundError:
                continue
            out.update(e.data_file.file_path for e in entries)
    return out


def _table_roots(table: Table) -> list[str]:
    props = table.metadata.properties
    roots = [table.location()]
    roots += [props[k] for k in ("write.data.path", "write.metadata.path", "write.object-storage.path") if k in props]
    return roots


def sweep_orphan_files(
    table: Table,
    dry_run: bool = False,
    *,
    catalog_fingerprint: str = "",
    uncommitted_min_age_seconds: float = UNCOMMITTED_MIN_AGE_SECONDS,
) -> list[str]:
    """Delete every file under the table's location (and write.data/metadata paths) that no retained
    snapshot references: at once if a snapshot once referenced it, else only once it is
    `uncommitted_min_age_seconds` old. Returns the removed locations, sorted; `dry_run` only lists them."""
    if uncommitted_min_age_seconds < 0:
        raise ValueError(f"uncommitted_min_age_seconds must be >= 0, got {uncommitted_min_age_seconds}")

    def act(t: Table) -> list[str]:
        keep = {_path_key(p) for p in referenced_files(t)}
        committed: set[str] | None = None  # read lazily: only needed for young unreferenced files
        now = time.time()
        orphans: list[str] = []
        for root in _table_roots(t):
            filesystem, base = _filesystem(t, root)
            scheme = urlparse(root).scheme
            for info in filesystem.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
                if info.type != pafs.FileType.File or info.path in keep or info.base_name == "version-hint.text":
                    continue
                age = now - info.mtime.timestamp() if info.mtime is not None else float("inf")
                if age < uncommitted_min_age_seconds:
                    if committed is None:
                        committed = {_path_key(p) for p in _once_committed_files(t)}
                    if info.path not in committed:
                        continue
                # the location in the table's own style (not Path.as_uri, which would quote the '=' of
                # partition directories into a different file name)
                orphans.append(f"{scheme}://{info.path}" if scheme else info.path)
        orphans = sorted(set(orphans))
        if not dry_run:
            for location in orphans:
                _delete_quietly(t, location)
        return orphans

    removed = _locked(table, catalog_fingerprint, act)
    log.info(
        "%s %d orphan files of %s", "would remove" if dry_run else "removed", len(removed), table_identifier(table)
    )
    return removed


def _delete_quietly(table: Table, location: str) -> None:
    try:
        table.io.delete(location)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------------------------- proof


def count_matching_in_retained_snapshots(table: Table, row_filter: str | BooleanExpression) -> dict[int, int]:
    """Rows matching `row_filter` in every snapshot the table still has, by snapshot id, counted by reading
    the data (not from metadata): the proof that no retained snapshot can read erased rows."""
    expr = _as_expression(row_filter)
    first = table.schema().fields[0].name
    counts: dict[int, int] = {}
    for snap in table.snapshots():
        reader = table.scan(
            row_filter=expr, selected_fields=(first,), snapshot_id=snap.snapshot_id
        ).to_arrow_batch_reader()
        counts[snap.snapshot_id] = sum(batch.num_rows for batch in reader)
    return counts


def refs_reading_rows(table: Table, matching_rows_by_snapshot: Mapping[int, int]) -> dict[str, int]:
    """The tags/branches whose head still reads matching rows (from `count_matching_in_retained_snapshots`):
    what keeps an erasure from completing, e.g. `runview-<id>` tags of views not yet superseded."""
    return {
        name: matching_rows_by_snapshot[ref.snapshot_id]
        for name, ref in sorted(table.refs().items())
        if matching_rows_by_snapshot.get(ref.snapshot_id)
    }


def _avro_blocks(raw: bytes) -> Iterable[bytes]:
    """The decompressed data blocks of an Avro object container file (Iceberg manifests compress them)."""
    buf = io.BytesIO(raw)

    def read_long() -> int:
        shift = result = 0
        while True:
            byte = buf.read(1)
            if not byte:
                raise EOFError("truncated Avro varint")
            b = byte[0]
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return (result >> 1) ^ -(result & 1)

    def read_bytes() -> bytes:
        return buf.read(read_long())

    if buf.read(4) != b"Obj\x01":
        return
    meta: dict[str, bytes] = {}
    while (count := read_long()) != 0:
        if count < 0:
            read_long()  # block size in bytes
            count = -count
        for _ in range(count):
            key = read_bytes().decode()
            meta[key] = read_bytes()
    codec_name = meta.get("avro.codec", b"null").decode()
    codec = KNOWN_CODECS.get(codec_name)  # type: ignore[call-overload]
    buf.read(16)  # sync marker
    while buf.tell() < len(raw):
        read_long()  # objects in the block
        data = read_bytes()
        buf.read(16)
        yield codec.decompress(data) if codec is not None else data


def _parquet_values(raw: bytes) -> Iterable[pa.Array]:
    """Every string/binary column chunk of a Parquet file, decoded (pages are compressed on disk)."""
    table = pq.read_table(io.BytesIO(raw))
    for column in table.columns:
        yield from _byte_arrays(column.combine_chunks() if column.num_chunks else pa.array([], column.type))


def _byte_arrays(array: pa.Array) -> Iterable[pa.Array]:
    t = array.type
    if pa.types.is_dictionary(t):
        yield from _byte_arrays(array.dictionary_decode())
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        yield array
    elif pa.types.is_fixed_size_binary(t):
        yield array.cast(pa.binary())
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _byte_arrays(pc.list_flatten(array))
    elif pa.types.is_struct(t):
        for i in range(t.num_fields):
            yield from _byte_arrays(array.field(i))
    elif pa.types.is_map(t):
        yield from _byte_arrays(array.keys)
        yield from _byte_arrays(array.items)


def _views(raw: bytes) -> Iterable[bytes | pa.Array]:
    """The readable forms of a file's content: its raw bytes, then decompressed/decoded forms."""
    yield raw
    if raw[:2] == b"\x1f\x8b":
        try:
            yield gzip.decompress(raw)
        except (OSError, EOFError, zlib.error):
            pass
    if raw[:4] == b"Obj\x01":
        yield from _avro_blocks(raw)
    if raw[:4] == b"PAR1" and raw[-4:] == b"PAR1":
        yield from _parquet_values(raw)


def find_bytes_in_files(
    root: str | Path, needles: Sequence[bytes], *, decode: bool = True, properties: Mapping[str, str] | None = None
) -> list[tuple[str, bytes]]:
    """Search every file under `root` for each needle, in the raw bytes and (unless `decode` is False)
    decoded: Parquet string/binary values, decompressed Avro blocks, gzip; returns sorted (path, needle).
    `root` is a local directory (paths returned as local paths) or an object store URI such as
    `s3://bucket/warehouse` (objects listed and read through pyarrow's filesystem, configured by the catalog
    `properties`: `s3.endpoint`, `s3.access-key-id`, ...; locations returned as `s3://bucket/key`)."""
    if not needles or any(not isinstance(n, bytes) or not n for n in needles):
        raise ValueError(f"needles must be non-empty bytes values, got {list(needles)!r}")
    hits: set[tuple[str, bytes]] = set()
    for path, raw in _files_under(str(root), properties or {}):
        missing = set(needles)
        for view in _views(raw) if decode else (raw,):
            for needle in list(missing):
                if isinstance(view, bytes):
                    found = needle in view
                else:
                    found = bool(pc.any(pc.match_substring(view, pattern=needle)).as_py())
                if found:
                    hits.add((path, needle))
                    missing.discard(needle)
            if not missing:
                break
    return sorted(hits)


def _files_under(root: str, properties: Mapping[str, str]) -> Iterable[tuple[str, bytes]]:
    """(location, bytes) of every file under a local directory or an object store prefix, one at a time."""
    scheme = urlparse(root).scheme
    if scheme in ("", "file"):
        base = Path(root.removeprefix("file://"))
        if not base.is_dir():
            raise FileNotFoundError(f"{root!r} is not a local directory")
        for dirpath, _, filenames in os.walk(base):
            for name in filenames:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    yield path, fh.read()
        return
    from pyiceberg.io import load_file_io

    file_io = load_file_io(dict(properties), root)
    if not isinstance(file_io, PyArrowFileIO):
        raise TypeError(f"searching {root!r} needs pyiceberg's PyArrowFileIO, got {type(file_io).__name__}")
    _, netloc, base = PyArrowFileIO.parse_location(root, dict(properties))
    filesystem = file_io.fs_by_scheme(scheme, netloc)
    infos = filesystem.get_file_info(pafs.FileSelector(base.rstrip("/"), recursive=True, allow_not_found=True))
    if not infos and filesystem.get_file_info(base.rstrip("/")).type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{root!r} holds no object")
    for info in sorted(infos, key=lambda i: i.path):
        if info.type == pafs.FileType.File:
            with filesystem.open_input_stream(info.path) as fh:
                yield f"{scheme}://{info.path}", fh.read()


# ---------------------------------------------------------------------------------------------- report


@dataclass(frozen=True)
class MaintenanceReport:
    """What one erasure/maintenance pass did to one table, and the proof it leaves."""

    table: str
    rows_deleted: int = 0
    cleanup_snapshot_id: int | None = None  # the file-less snapshot of drop_delete_manifests, if any
    refs_removed: tuple[str, ...] = ()
    snapshots_expired: tuple[int, ...] = ()
    files_removed: tuple[str, ...] = ()
    matching_rows_by_snapshot: Mapping[int, int] = field(default_factory=dict)
    blocking_refs: Mapping[str, int] = field(default_factory=dict)  # ref name -> matching rows its head reads

    @property
    def erased(self) -> bool:
        """True when no retained snapshot reads a matching row."""
        return all(n == 0 for n in self.matching_rows_by_snapshot.values())

    def as_metadata(self) -> dict[str, object]:
        """JSON-able values, e.g. for Dagster asset metadata (snapshot ids as strings: JSON has no int64)."""
        return {
            "table": self.table,
            "rows_deleted": self.rows_deleted,
            "cleanup_snapshot_id": str(self.cleanup_snapshot_id) if self.cleanup_snapshot_id is not None else None,
            "refs_removed": list(self.refs_removed),
            "snapshots_expired": [str(s) for s in self.snapshots_expired],
            "files_removed": len(self.files_removed),
            "matching_rows_by_snapshot": {str(k): v for k, v in self.matching_rows_by_snapshot.items()},
            "blocking_refs": dict(self.blocking_refs),
            "erased": self.erased,
        }


def erase_rows(
    table: Table,
    row_filter: str | BooleanExpression | None,
    snapshot_properties: Mapping[str, str],
    *,
    refs: Iterable[str] = (),
    keep_last: int = 1,
    catalog_fingerprint: str = "",
    uncommitted_min_age_seconds: float = UNCOMMITTED_MIN_AGE_SECONDS,
) -> MaintenanceReport:
    """Delete the matching rows (None: delete nothing, only maintain), drop delete-only manifests, remove
    `refs`, expire snapshots, sweep orphan files, and prove the result; a rerun is a no-op."""
    kw = {"catalog_fingerprint": catalog_fingerprint}
    rows = delete_rows(table, row_filter, snapshot_properties, **kw) if row_filter is not None else 0
    cleanup = drop_delete_manifests(table, snapshot_properties, **kw)
    removed_refs = remove_refs(table, refs, **kw)
    expired = expire_snapshots(table, keep_last, **kw)
    files = sweep_orphan_files(table, uncommitted_min_age_seconds=uncommitted_min_age_seconds, **kw)
    proof = count_matching_in_retained_snapshots(table, row_filter) if row_filter is not None else {}
    return MaintenanceReport(
        table_identifier(table),
        rows,
        cleanup,
        tuple(removed_refs),
        tuple(expired),
        tuple(files),
        proof,
        refs_reading_rows(table, proof),
    )
