"""Reading a published run view from the lakehouse, and the checks every published view passes (catalog or bundle).

From the lakehouse (`published_from_catalog`, `catalog=` a `Lakehouse` or a pyiceberg catalog; an embedded catalog,
the configured one or `iceberg_catalog.readonly`'s, is read from the tables' metadata files without importing
pyiceberg, `iceberg_catalog.metadata_files`, falling back to pyiceberg for what that does not read):
1. run_view.manifests (current snapshot, since the status moves) gives the row of the id; only `published` is
   opened: candidate -> RunViewNotPublished, rejected -> RunViewRejected, superseded -> RunViewSuperseded
   naming `superseded_by_request`. The stored manifest bytes must hash to manifest_sha256.
2. run_view.samples is read at the snapshot of the view's tag (`tag_name(id)`) and must match the manifest
   (n_samples, n_tokens and the samples digest).
3. tokenized.documents is planned at the snapshot the manifest pins for it (`Manifest.inputs`); the doc_id
   column of each data file locates every sample's document as (file, row group, row), unless the view was
   published with its layout (`iceberg_catalog.run_view_contract.ViewLayout`), which says so and carries one
   digest per row group.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from iceberg_catalog import arrays
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.metadata_files import TableState, UnsupportedTableState, catalog_pointer, local_path, read_local
from iceberg_catalog.run_view_contract import MANIFESTS_TABLE, SAMPLES_TABLE, TOKENS_TABLE, Manifest
from loader.errors import (
    ManifestIntegrityError,
    MissingDocument,
    RunViewNotFound,
    RunViewNotPublished,
    RunViewRejected,
    RunViewSuperseded,
    SamplesMismatch,
    UnsupportedLayout,
)
from loader.storage import remember_footer

if TYPE_CHECKING:  # a training process reading an embedded catalog never imports pyiceberg (`_MetadataTables`)
    from pyiceberg.catalog import Catalog

    from iceberg_catalog.lakehouse import Lakehouse

SAMPLE_COLUMNS = (
    "sample_index",
    "doc_id",
    "tokenizer_id",
    "crawl",
    "segment",
    "component",
    "repetition",
    "n_tokens",
    "tokens_sha256",
)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Published:
    """A published view as read and checked, from the catalog or a bundle: what `loader.view` serves it from."""

    run_view_id: str
    status: str
    manifest: Manifest
    manifest_json: str  # the stored bytes, exactly (an exported bundle holds them)
    manifest_sha256: str  # the recorded hash they were checked against
    samples: pa.Table  # sample_index order, plus the layout columns file_index, row_group, row
    files: list[str]  # the token files, sorted
    io_properties: dict[str, str]  # FileIO properties of the token files
    layout: contract.ViewLayout | None  # the published layout, when it holds for these samples and files


def parse_manifest(manifest_json: str, manifest_sha256: str, run_view_id: str) -> Manifest:
    """The manifest, after checking its bytes against the recorded hash."""
    actual = hashlib.sha256(manifest_json.encode("utf-8")).hexdigest()
    if actual != manifest_sha256:
        raise ManifestIntegrityError(
            f"run view {run_view_id}: manifest_json hashes to {actual}, the row records "
            f"{manifest_sha256}; the manifest was altered"
        )
    manifest = json.loads(manifest_json)
    try:
        return Manifest.from_dict(manifest)
    except ValueError as exc:  # a key the loader needs is missing
        raise ManifestIntegrityError(f"run view {run_view_id}: {exc}") from None


def check_status(run_view_id: str, status: str, superseded_by_request: str | None = None) -> None:
    """Refuse anything but a published view, with the named error of its status."""
    if status == "published":
        return
    if status == "candidate":
        raise RunViewNotPublished(
            f"run view {run_view_id} is 'candidate'; approve it in the Dagster UI (job "
            f"publish_run_view) before training on it"
        )
    if status == "rejected":
        raise RunViewRejected(f"run view {run_view_id} was rejected by its reviewer; build a new candidate")
    if status == "superseded":
        raise RunViewSuperseded(
            f"run view {run_view_id} is superseded by deletion request "
            f"{superseded_by_request}; train on the view rebuilt without the deleted data",
            superseded_by_request=superseded_by_request,
        )
    raise RunViewNotPublished(f"run view {run_view_id} has unknown status {status!r}")


def check_samples(run_view_id: str, manifest: Manifest, samples: pa.Table) -> None:
    """The samples table must be exactly what the manifest froze."""
    idx = arrays.to_numpy(samples.column("sample_index"))
    if samples.num_rows != manifest.n_samples or not np.array_equal(idx, np.arange(samples.num_rows)):
        raise SamplesMismatch(
            f"run view {run_view_id}: {samples.num_rows} sample rows (indices not 0..n-1 or "
            f"count differs), the manifest froze {manifest.n_samples}"
        )
    n_tokens = int(arrays.to_numpy(samples.column("n_tokens")).astype(np.int64).sum())
    if n_tokens != manifest.n_tokens:
        raise SamplesMismatch(
            f"run view {run_view_id}: samples hold {n_tokens} tokens, the manifest {manifest.n_tokens}"
        )
    digest = contract.samples_digest(samples)
    if digest != manifest.samples_sha256:
        raise SamplesMismatch(f"run view {run_view_id}: samples digest {digest} != manifest {manifest.samples_sha256}")
    if samples.num_rows and int(arrays.to_numpy(samples.column("n_tokens")).min()) < 1:
        raise SamplesMismatch(f"run view {run_view_id}: a sample has no tokens")
    tids = set(samples.column("tokenizer_id").to_pylist())
    if tids - {manifest.tokenizer_id}:
        raise SamplesMismatch(
            f"run view {run_view_id}: samples use tokenizers {sorted(tids)}, the manifest {manifest.tokenizer_id}"
        )


def read_layout(blob: bytes, sha256: str, run_view_id: str, manifest: Manifest, n_samples: int, where: str):
    """The view's published layout (contract.ViewLayout) from its blob, or None (logged) when the blob does not
    hash to `sha256` or was made for another manifest, samples or count: the view then opens by locating its
    documents itself, every document checksummed one by one."""
    problem = None
    if hashlib.sha256(blob).hexdigest() != sha256:
        problem = f"hashes to {hashlib.sha256(blob).hexdigest()}, the view records {sha256}"
    else:
        try:
            layout = contract.ViewLayout.decode(blob)
        except (ValueError, KeyError) as e:
            problem = str(e)
        else:
            if layout.manifest_sha256 != manifest.sha256:
                problem = f"was made for manifest {layout.manifest_sha256}"
            elif layout.samples_sha256 != manifest.samples_sha256 or len(layout.row) != n_samples:
                problem = f"was made for other samples ({len(layout.row)} rows, digest {layout.samples_sha256})"
            elif len(layout.row) and int(layout.file_index.max()) >= len(layout.files):
                problem = "names a file index past its file list"
    if problem is None:
        return layout
    log.warning("run view %s: layout %s %s; locating its documents instead", run_view_id, where, problem)
    return None


def with_locations(samples: pa.Table, file_index, row_group, row) -> pa.Table:
    """`samples` plus its layout columns file_index, row_group, row (int32)."""
    return (
        samples.append_column("file_index", arrays.numeric(file_index, pa.int32()))
        .append_column("row_group", arrays.numeric(row_group, pa.int32()))
        .append_column("row", arrays.numeric(row, pa.int32()))
    )


# --- the lakehouse ----------------------------------------------------------------------------------------


def as_lakehouse(catalog: Lakehouse | Catalog | None = None) -> Lakehouse:
    """The lakehouse to read: a `Lakehouse` as is, a pyiceberg catalog wrapped, None = the configured catalog
    (`TOKENLAKE_CATALOG` or the embedded one), opened without creating tables: a training job only reads (the
    embedded catalog through `iceberg_catalog.readonly`, without SQLAlchemy and pandas)."""
    from iceberg_catalog.catalog import CatalogConfig
    from iceberg_catalog.lakehouse import Lakehouse
    from iceberg_catalog.readonly import read_only_catalog

    if isinstance(catalog, Lakehouse):
        return catalog
    if catalog is None:
        config = CatalogConfig.resolve()
        return Lakehouse(config, catalog=read_only_catalog(config))
    return Lakehouse(catalog=catalog)


# what opening a view reads of its run_view.manifests row (strings only: converting its timestamps to Python
# would import pandas)
MANIFEST_ROW_COLUMNS = ("run_view_id", "status", "manifest_sha256", "manifest_json", "superseded_by_request")


class _IcebergTables:
    """The view's tables through pyiceberg, any catalog: scans planned by pyiceberg (partition pruning), the
    planned files then read directly (`_view_rows`), or by a pyiceberg scan where that cannot be done."""

    def __init__(self, lakehouse: Lakehouse) -> None:
        from iceberg_catalog import schemas

        self.lakehouse = lakehouse
        defs = (schemas.RUN_VIEW_MANIFESTS, schemas.RUN_VIEW_SAMPLES, schemas.TOKENIZED_DOCUMENTS)
        self._defs = {t.identifier: t for t in defs}
        self._tables: dict = {}

    def table(self, ident: str):
        """The table, loaded once per open: its tag, rows and properties are read from one metadata version."""
        table = self._tables.get(ident)
        if table is None:
            table = self._tables[ident] = self.lakehouse.table(self._defs[ident])
        return table

    def rows(self, ident: str, snapshot_id: int | None, run_view_id: str, columns: Sequence[str]) -> pa.Table:
        """`columns` of the rows of `run_view_id` at `snapshot_id` (None: the current snapshot)."""
        from pyiceberg.expressions import EqualTo

        table, where = self.table(ident), EqualTo("run_view_id", run_view_id)
        tasks = list(table.scan(row_filter=where, snapshot_id=snapshot_id).plan_files())
        got = None
        if not any(t.delete_files for t in tasks):
            files = [(t.file.file_path, t.file.record_count) for t in tasks]
            got = _view_rows(lambda path: table.io.new_input(path).open(), files, run_view_id, columns)
        if got is not None:
            return got
        if snapshot_id is None:
            return self.lakehouse.scan(self._defs[ident], columns, row_filter=where)
        return self.lakehouse.scan_at(self._defs[ident], snapshot_id, columns, where)

    def tag_snapshot(self, ident: str, tag: str) -> int | None:
        snap = self.table(ident).snapshot_by_name(tag)
        return None if snap is None else snap.snapshot_id

    def properties(self, ident: str) -> dict[str, str]:
        return dict(self.table(ident).properties)

    def has_snapshot(self, ident: str, snapshot_id: int) -> bool:
        return self.table(ident).snapshot_by_id(int(snapshot_id)) is not None

    def read_file(self, ident: str, path: str) -> bytes:
        with self.table(ident).io.new_input(path).open() as f:
            return f.read()

    def io_properties(self, ident: str) -> dict[str, str]:
        return dict(self.table(ident).io.properties)

    def locate(self, manifest: Manifest, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
        return _locate_documents(self.table(TOKENS_TABLE), manifest, samples)

    def release(self) -> None:
        self.lakehouse.release()


class _MetadataTables:
    """The view's tables of an embedded catalog with a local warehouse, read from their committed metadata files
    (`iceberg_catalog.metadata_files`): the same rows as `_IcebergTables` without importing pyiceberg (~0.35 s of a
    fresh training process). What it does not read (delete files, another table format or codec, a table outside
    the warehouse, a view published without its layout) raises UnsupportedTableState: the caller then opens the
    view through pyiceberg."""

    def __init__(self, pointer, warehouse: str) -> None:
        self._pointer, self._warehouse, self._states = pointer, local_path(warehouse), {}

    def state(self, ident: str) -> TableState:
        state = self._states.get(ident)
        if state is None:
            try:
                location = self._pointer(ident)
            except LookupError as exc:  # no such table: pyiceberg's path raises the named error
                raise UnsupportedTableState(str(exc)) from None
            state = TableState.load(location)
            where = local_path(str(state.metadata.get("location", "")))
            if self._warehouse is None or where is None or not (where + "/").startswith(self._warehouse + "/"):
                raise UnsupportedTableState(f"{ident} lives outside the warehouse {self._warehouse!r}")
            self._states[ident] = state
        return state

    def rows(self, ident: str, snapshot_id: int | None, run_view_id: str, columns: Sequence[str]) -> pa.Table:
        state = self.state(ident)
        sid = state.current_snapshot_id if snapshot_id is None else snapshot_id
        files = [(f.path, f.record_count) for f in state.data_files(sid)]
        got = _view_rows(lambda path: open(local_path(path), "rb"), files, run_view_id, columns)  # noqa: SIM115
        if got is None:
            raise UnsupportedTableState(f"{ident}: its files do not hold the columns {list(columns)} by name")
        return got

    def tag_snapshot(self, ident: str, tag: str) -> int | None:
        return self.state(ident).ref_snapshot_id(tag)

    def properties(self, ident: str) -> dict[str, str]:
        return self.state(ident).properties

    def has_snapshot(self, ident: str, snapshot_id: int) -> bool:
        return self.state(ident).has_snapshot(snapshot_id)

    def read_file(self, ident: str, path: str) -> bytes:
        return read_local(path)

    def io_properties(self, ident: str) -> dict[str, str]:
        return {}  # local files: read with `open`

    def locate(self, manifest: Manifest, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
        raise UnsupportedTableState("the view has no published layout: locating its documents plans a pyiceberg scan")

    def release(self) -> None:
        pass


def _metadata_tables(catalog) -> _MetadataTables | None:
    """`_MetadataTables` for the configured catalog (None) when it is an embedded SQLite catalog that exists, or
    for a catalog that reads table pointers itself (`iceberg_catalog.readonly.ReadOnlyCatalog`); else None."""
    if catalog is None:
        from iceberg_catalog.catalog import CatalogConfig

        config = CatalogConfig.resolve()
        db = config.sqlite_path
        if db is None or not db.is_file():
            return None
        return _MetadataTables(lambda ident: catalog_pointer(str(db), config.name, ident), config.warehouse)
    pointer = getattr(catalog, "metadata_location", None)
    if callable(pointer) and isinstance(getattr(catalog, "properties", None), Mapping):
        return _MetadataTables(pointer, str(catalog.properties.get("warehouse", "")))
    return None


def _manifest_row(tables, run_view_id: str) -> dict:
    rows = tables.rows(MANIFESTS_TABLE, None, run_view_id, MANIFEST_ROW_COLUMNS)
    if rows.num_rows == 0:
        raise RunViewNotFound(
            f"no run view {run_view_id!r} in {MANIFESTS_TABLE} of this catalog; list them with "
            f"`tokenlake runview list` or the Dagster UI"
        )
    if rows.num_rows > 1:
        raise ManifestIntegrityError(f"run view {run_view_id}: {rows.num_rows} rows in {MANIFESTS_TABLE}")
    return rows.to_pylist()[0]


def _pinned_samples(tables, run_view_id: str) -> tuple[pa.Table, Mapping[str, str]]:
    """(the view's samples at its tag, run_view.samples' table properties)."""
    tag = contract.tag_name(run_view_id)
    snapshot_id = tables.tag_snapshot(SAMPLES_TABLE, tag)
    if snapshot_id is None:
        raise SamplesMismatch(
            f"{SAMPLES_TABLE} has no tag {tag}: the view was never published (or its tag was removed); re-publish it"
        )
    got = tables.rows(SAMPLES_TABLE, snapshot_id, run_view_id, SAMPLE_COLUMNS)
    return got.sort_by("sample_index").select(SAMPLE_COLUMNS), tables.properties(SAMPLES_TABLE)


def _view_rows(open_file, files: Sequence[tuple[str, int]], run_view_id: str, columns) -> pa.Table | None:
    """`columns` of the view's rows read straight from a snapshot's data files ((path, record count), none with
    delete files): what a pyiceberg scan returns when the columns are the table's own (no schema evolution since:
    field names match), at a tenth of pyiceberg's set-up cost for one small scan, and without importing
    pyiceberg's Arrow reader (pandas); None otherwise (the caller scans with pyiceberg)."""
    wanted = ["run_view_id", *(c for c in columns if c != "run_view_id")]
    parts = []
    for path, record_count in files:
        try:
            with open_file(path) as f:
                part = pq.ParquetFile(f).read(columns=wanted, use_threads=False)
        except (KeyError, ValueError, pa.ArrowInvalid):  # a column named otherwise in this file: let pyiceberg map it
            return None
        if part.num_rows != record_count:
            return None
        # a mask from Python values: pc.equal(column, str) and pa.array import pandas (iceberg_catalog.arrays)
        mine = arrays.mask([v == run_view_id for v in part.column("run_view_id").to_pylist()])
        parts.append(part.filter(mine).select(list(columns)))
    if not parts:
        return None
    return pa.concat_tables(parts, promote_options="permissive")


def _published_layout(tables, run_view_id: str, manifest: Manifest, samples: pa.Table, properties):
    """(layout, FileIO properties of the token files) when the view was published with a layout, else None."""
    pointer = properties.get(contract.layout_property(run_view_id))
    if not pointer:
        return None
    sha, _, path = pointer.partition(" ")
    snapshot_id = manifest.inputs.get(TOKENS_TABLE)
    if snapshot_id is None or not tables.has_snapshot(TOKENS_TABLE, int(snapshot_id)):
        return None  # the locating path raises the named error
    try:
        blob = tables.read_file(TOKENS_TABLE, path)
    except (OSError, FileNotFoundError) as e:
        log.warning("run view %s: layout %s unreadable (%s); locating its documents instead", run_view_id, path, e)
        return None
    layout = read_layout(blob, sha, run_view_id, manifest, samples.num_rows, path)
    return None if layout is None else (layout, tables.io_properties(TOKENS_TABLE))


def _locate_documents(table, manifest: Manifest, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
    """Find each sample's document in the pinned token files (`table`: tokenized.documents through pyiceberg):
    (sorted file paths, samples + layout columns, FileIO properties)."""
    from pyiceberg.expressions import And, EqualTo, In

    snapshot_id = manifest.inputs.get(TOKENS_TABLE)
    if snapshot_id is None or table.snapshot_by_id(int(snapshot_id)) is None:
        raise MissingDocument(
            f"{TOKENS_TABLE} has no snapshot {snapshot_id} (pinned by the manifest): it "
            f"was expired; a published view's tag should have kept it"
        )
    segments = sorted(set(samples.column("segment").to_pylist()))
    where = EqualTo("tokenizer_id", manifest.tokenizer_id)
    if segments:
        where = And(where, In("segment", segments))
    tasks = list(table.scan(row_filter=where, snapshot_id=int(snapshot_id)).plan_files())
    if any(t.delete_files for t in tasks):
        raise UnsupportedLayout(
            f"{TOKENS_TABLE} has delete files at the pinned snapshot; the loader reads "
            "row groups directly and needs copy-on-write files (compact the table first)"
        )
    files = sorted({t.file.file_path for t in tasks})
    cached = _cached_layout(manifest, snapshot_id, files, samples)
    props = dict(table.io.properties)
    if cached is not None:
        return files, cached, props

    def doc_ids_of(path: str) -> tuple[pa.ChunkedArray, np.ndarray]:
        # one read of the doc_id column per file (not per row group), without pre-buffering (30% faster here)
        with table.io.new_input(path).open() as f:
            pf = pq.ParquetFile(f, pre_buffer=False)
            col = pf.read(columns=["doc_id"], use_threads=False).column(0)
            if callable(getattr(f, "size", None)):  # the first batch's reads then parse no footer again
                remember_footer(path, pf.metadata, f.size())
            return col, np.array([pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)], np.int64)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(4, max(1, len(files)))) as pool:  # pyarrow decodes without the GIL
        read = list(pool.map(doc_ids_of, files))
    fi, rg, row, missing = contract.locate_documents(samples.column("doc_id"), read)
    if missing:
        raise MissingDocument(
            f"{len(missing)} documents of the view are not in {TOKENS_TABLE} at snapshot "
            f"{snapshot_id}, e.g. {missing[:3]}"
        )
    with_layout = with_locations(samples, fi, rg, row)
    _store_layout(manifest, snapshot_id, files, with_layout)
    return files, with_layout, props


LAYOUT_CACHE_ENV = "TOKENLAKE_LAYOUT_CACHE"
_LAYOUT_COLUMNS = ("file_index", "row_group", "row")


def _layout_path(manifest: Manifest, snapshot_id, files: Sequence[str]) -> Path | None:
    """Where this node keeps the located layout of a view (TOKENLAKE_LAYOUT_CACHE; unset: nowhere). The key
    covers the manifest, the pinned snapshot and the token files, all immutable, so an entry never goes stale."""
    root = os.environ.get(LAYOUT_CACHE_ENV)
    if not root:
        return None
    key = hashlib.sha256(json.dumps([manifest.sha256, str(snapshot_id), list(files)]).encode())
    return Path(root) / f"layout-{key.hexdigest()[:32]}.npy"


def _cached_layout(manifest: Manifest, snapshot_id, files: Sequence[str], samples: pa.Table) -> pa.Table | None:
    path = _layout_path(manifest, snapshot_id, files)
    if path is None or not path.is_file():
        return None
    raw = path.read_bytes()
    digest, body = raw[:32], raw[32:]
    if hashlib.sha256(body).digest() != digest or len(body) != 12 * samples.num_rows:
        path.unlink(missing_ok=True)  # torn or altered: locate again
        return None
    loc = np.frombuffer(body, dtype="<i4").reshape(3, -1)
    for name, values in zip(_LAYOUT_COLUMNS, loc, strict=True):
        samples = samples.append_column(name, arrays.numeric(values, pa.int32()))
    return samples


def _store_layout(manifest: Manifest, snapshot_id, files: Sequence[str], with_layout: pa.Table) -> None:
    path = _layout_path(manifest, snapshot_id, files)
    if path is None:
        return
    body = np.stack([with_layout.column(c).to_numpy().astype("<i4") for c in _LAYOUT_COLUMNS]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(hashlib.sha256(body).digest() + body)
    os.replace(tmp, path)


def published_from_catalog(catalog: Lakehouse | Catalog | None, run_view_id: str) -> Published:
    """A published view read from the lakehouse, every check on the way (status, manifest hash, samples digest at
    the view's tag), its samples located in the token files. An embedded catalog is read from its metadata files
    when it can be (`_MetadataTables`), else through pyiceberg."""
    light = _metadata_tables(catalog)
    if light is not None:
        try:
            return _read_published(light, run_view_id)
        except UnsupportedTableState as exc:
            log.info("run view %s: reading the catalog through pyiceberg (%s)", run_view_id, exc)
    tables = _IcebergTables(as_lakehouse(catalog))
    try:
        return _read_published(tables, run_view_id)
    finally:
        if catalog is None:  # opened here: its connections are not the caller's to reuse
            tables.release()


def _read_published(tables, run_view_id: str) -> Published:
    row = _manifest_row(tables, run_view_id)
    check_status(run_view_id, row["status"], row.get("superseded_by_request"))
    manifest = parse_manifest(row["manifest_json"], row["manifest_sha256"], run_view_id)
    samples, properties = _pinned_samples(tables, run_view_id)
    check_samples(run_view_id, manifest, samples)
    published = _published_layout(tables, run_view_id, manifest, samples, properties)
    if published is not None:
        layout, props = published
        with_layout = with_locations(samples, layout.file_index, layout.row_group, layout.row)
        files = list(layout.files)
    else:
        layout = None
        files, with_layout, props = tables.locate(manifest, samples)
    return Published(
        run_view_id,
        row["status"],
        manifest,
        row["manifest_json"],
        row["manifest_sha256"],
        with_layout,
        files,
        props,
        layout,
    )
