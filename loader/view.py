"""Opening a published run view: from the lakehouse by id, or from an exported bundle (no catalog needed).

The run view contract (manifest format and hash, tag name, samples digest, token dtypes) is
`iceberg_catalog.run_view_contract`, shared with the pipeline that writes the views.

From the lakehouse (`open_run_view`, `catalog=` a `Lakehouse` or a pyiceberg catalog; an embedded catalog, the
configured one or `iceberg_catalog.readonly`'s, is read from the tables' metadata files without importing pyiceberg,
`iceberg_catalog.metadata_files`, falling back to pyiceberg for what that does not read):
1. run_view.manifests (current snapshot, since the status moves) gives the row of the id; only `published` is
   opened: candidate -> RunViewNotPublished, rejected -> RunViewRejected, superseded -> RunViewSuperseded
   naming `superseded_by_request`. The stored manifest bytes must hash to manifest_sha256.
2. run_view.samples is read at the snapshot of the view's tag (`tag_name(id)`) and must match the manifest
   (n_samples, n_tokens and the samples digest).
3. tokenized.documents is planned at the snapshot the manifest pins for it (`manifest["inputs"]`); the
   doc_id column of each data file locates every sample's document as (file, row group, row). That layout
   gives the block ids of the order (one block per (repetition, file, row group), files sorted by path), and
   the reader (`RowGroupSource`) reads whole row groups on demand and verifies tokens_sha256 of every document
   it decodes, raising ChecksumMismatch with the doc_id.

A bundle (`export_run_view` -> directory; `open_run_view(bundle=dir)`) holds manifest.json (the exact hashed
bytes), run_view.json (id, status at export, token files) and samples.parquet (samples plus their layout),
so a cluster without catalog access reads the same Parquet token files (local, or S3 through pyiceberg's
FileIO with `io_properties`) in the same order. Only a published view is exported; the bundle cannot learn
of a later supersession, so the export records its time and status.

`in_memory_view` builds a view over token arrays held in memory (tests, notebooks); it is never "published"
in a lakehouse but behaves identically for order, packing, state and audit.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from iceberg_catalog import arrays
from iceberg_catalog import run_view_contract as contract
from iceberg_catalog.metadata_files import TableState, UnsupportedTableState, catalog_pointer, local_path, read_local
from iceberg_catalog.run_view_contract import MANIFESTS_TABLE, SAMPLES_TABLE, TOKENS_TABLE
from loader.errors import (
    ChecksumMismatch,
    ManifestIntegrityError,
    MissingDocument,
    RunViewNotFound,
    RunViewNotPublished,
    RunViewRejected,
    RunViewSuperseded,
    SamplesMismatch,
    UnsupportedLayout,
)
from loader.order import chunk_blocks
from loader.storage import remember_footer

if TYPE_CHECKING:  # a training process reading an embedded catalog never imports pyiceberg (`_MetadataTables`)
    from pyiceberg.catalog import Catalog

    from iceberg_catalog.lakehouse import Lakehouse

BUNDLE_FORMAT = "tokenlake.run_view_bundle/1"
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
# decoded row groups kept per process: three block windows (two when a batch straddles windows re-read some)
DEFAULT_CACHED_ROW_GROUPS = 24


class TokenSource(Protocol):
    """Where a view's tokens come from: verified token arrays by sample index."""

    def read(self, sample_indices: Iterable[int]) -> dict[int, np.ndarray]: ...


def verified_tokens(doc_id: str, data: bytes, expected_sha256: str, token_dtype: str) -> np.ndarray:
    """Decode stored token bytes after checking them against the recorded checksum."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected_sha256:
        raise ChecksumMismatch(
            f"document {doc_id}: tokens hash to {actual}, the run view records {expected_sha256}; "
            f"the token file was altered or corrupted: rebuild the tokenized partition and "
            f"the run view",
            doc_id,
        )
    return np.frombuffer(data, dtype=contract.token_dtype(token_dtype))


@dataclass
class InMemorySource:
    """Token bytes held in memory, verified on every read like the Parquet source."""

    data: Mapping[str, bytes]
    doc_ids: Sequence[str]
    tokens_sha256: Sequence[str]
    token_dtype: str

    def read(self, sample_indices: Iterable[int]) -> dict[int, np.ndarray]:
        out = {}
        for s in sample_indices:
            doc = self.doc_ids[s]
            out[s] = verified_tokens(doc, self.data[doc], self.tokens_sha256[s], self.token_dtype)
        return out


_READER_LOCK = threading.Lock()


@dataclass
class RowGroup:
    """One decoded row group: its tokens back to back, where each row starts (n_rows + 1 entries, in tokens), the
    raw bytes the checksums are over with each row's byte start, and which rows are verified so far."""

    tokens: np.ndarray
    row_starts: np.ndarray
    data: memoryview
    byte_starts: np.ndarray
    verified: np.ndarray  # bool per row: checksummed once, when a batch first reads it
    values: pa.Array | None = None  # the token column itself (binary per row): `read_stream` takes rows from it
    where: str = ""
    from_cache: bool = False  # decoded from the node-local cache (a copy that fails is fetched again)

    @property
    def nbytes(self) -> int:
        return int(self.tokens.nbytes + self.row_starts.nbytes + self.byte_starts.nbytes)


def decode_row_group(table: pa.Table, dtype: np.dtype, where: str) -> RowGroup:
    """Expose a row group's `tokens` column without copying it; nothing is verified yet (`verify_rows`)."""
    col = table.column("tokens")
    arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    data, rel = contract.token_value_bytes(arr)
    size = len(data)
    if size % dtype.itemsize or np.any(rel % dtype.itemsize):
        raise UnsupportedLayout(f"{where}: a token array is not a whole number of {dtype} tokens")
    tokens = np.frombuffer(data, dtype=np.uint8, count=size).view(dtype) if size else np.zeros(0, dtype)
    return RowGroup(tokens, rel // dtype.itemsize, data, rel, np.zeros(len(arr), bool), arr, where)


def verify_rows(entry: RowGroup, rows: np.ndarray, expected_sha256: np.ndarray, name_document=None) -> None:
    """Checksum the rows of `entry` a batch reads that no earlier batch has: `rows[i]` must hash to
    `expected_sha256[i]` (32 raw bytes, numpy "S32"). One sha256 per document, once per decoded copy; on a
    mismatch `name_document(i)` names the document; ChecksumMismatch names the run view, object and row group."""
    rows = np.asarray(rows, np.int64)
    if len(rows) and int(rows.max()) >= len(entry.verified):
        raise MissingDocument(
            f"{entry.where} has {len(entry.verified)} rows, the view expects a document at row {int(rows.max())}"
        )
    todo = np.flatnonzero(~entry.verified[rows])
    if not len(todo):
        return
    todo_rows, first = np.unique(rows[todo], return_index=True)
    at = todo[first]  # positions in `rows` of the documents checked now
    data, sha, starts = entry.data, hashlib.sha256, entry.byte_starts
    digests = b"".join(
        [sha(data[a:b]).digest() for a, b in zip(starts[todo_rows].tolist(), starts[todo_rows + 1].tolist())]
    )
    want = np.asarray(expected_sha256)[at]
    if digests != want.tobytes():
        got = np.frombuffer(digests, dtype="S32")
        j = int(np.flatnonzero(got != want)[0])
        i = int(at[j])
        doc = name_document(i) if name_document is not None else f"at row {int(rows[i])}"
        raise ChecksumMismatch(
            f"{entry.where}: document {doc} (row {int(rows[i])}) tokens hash to {got[j].hex()}, the run view "
            f"records {want[j].hex()}; the token object was altered or corrupted: rebuild the tokenized "
            f"partition and the run view",
            doc,
        )
    entry.verified[todo_rows] = True


@dataclass
class RowGroupSource:
    """Reads whole Parquet row groups of the pinned token files (through `reader`: local files, FileIO, or S3
    through a node-local cache) and keeps the last `max_cached` decoded ones in memory; every document is
    checksummed once, when its row group is decoded. Caches are per process (safe across DataLoader forks)."""

    files: tuple[str, ...]
    file_index: np.ndarray  # per sample
    row_group: np.ndarray
    row: np.ndarray
    doc_ids: Sequence[str]
    tokens_sha256: Sequence[str]
    io_properties: Mapping[str, str] = field(default_factory=dict)
    max_cached: int = DEFAULT_CACHED_ROW_GROUPS
    on_read: object = None  # optional callable(seconds): row-group read latency (loader.metrics)
    run_view_id: str = ""
    storage: object = None  # optional loader.storage.StorageConfig (retries, timeouts, node-local cache)
    _pid: int = field(default=-1, repr=False, init=False)
    _cache: OrderedDict = field(default_factory=OrderedDict, repr=False, init=False)
    _reader: object = field(default=None, repr=False, init=False)

    token_dtype: str = "uint16"
    # sha256 of each row group's token values ({file index << 32 | row group: 32 bytes}), from the layout the
    # view was published with: a decoded row group that matches has every document verified in one call
    group_sha256: Mapping[int, bytes] | None = None
    _sha_bytes: np.ndarray | None = field(default=None, repr=False, init=False)
    # per process: row groups verified by their digest, and those whose digest did not match (read per document)
    group_checks: dict = field(default_factory=lambda: {"verified": 0, "mismatched": 0}, repr=False, init=False)

    def __post_init__(self) -> None:
        self.key = (np.asarray(self.file_index, np.int64) << 32) | np.asarray(self.row_group, np.int64)
        self.row = np.asarray(self.row, np.int64)
        self.dtype = contract.token_dtype(self.token_dtype)

    @property
    def sha_bytes(self) -> np.ndarray:
        """Every sample's tokens_sha256 as 32 raw bytes (numpy S32), converted once."""
        if self._sha_bytes is None:
            self._sha_bytes = np.frombuffer(bytes.fromhex("".join(self.tokens_sha256)), dtype="S32")
        return self._sha_bytes

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_cache"], state["_reader"], state["_pid"] = OrderedDict(), None, -1
        state["group_checks"] = {"verified": 0, "mismatched": 0}
        return state

    @property
    def reader(self):
        """This process's row-group reader (loader.storage.RowGroupReader)."""
        if self._pid != os.getpid():
            from loader.storage import RowGroupReader

            with _READER_LOCK:  # read-ahead threads ask at the same time; _pid goes last
                if self._pid != os.getpid():
                    self._cache = OrderedDict()
                    self._reader = RowGroupReader(self.io_properties, self.storage)
                    self._pid = os.getpid()
        return self._reader

    def row_group_entry(self, key: int) -> RowGroup:
        """The decoded row group `key` (file index << 32 | row group), from memory or read now; its documents are
        verified as batches read them (`check`)."""
        reader = self.reader
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        fi, rg = int(key >> 32), int(key & 0xFFFFFFFF)
        view = f"run view {self.run_view_id}, " if self.run_view_id else ""
        t0 = time.perf_counter()
        entry = reader.read_verified(
            self.files[fi], rg, lambda table, where: decode_row_group(table, self.dtype, view + where)
        )
        if callable(self.on_read):
            self.on_read(time.perf_counter() - t0)
        self._remember(key, entry)
        return entry

    def _vouch(self, key: int, entry: RowGroup) -> None:
        """Verify a freshly decoded row group with ONE sha256 against its published digest: a match marks every
        row verified; a mismatch (or no digest) leaves its documents to the per-document check, which names the
        document that differs."""
        want = self.group_sha256.get(key) if self.group_sha256 else None
        if want is None or entry.verified.all():
            return
        if contract.row_group_digest(entry.data) == want:
            entry.verified[:] = True
            self.group_checks["verified"] += 1
        else:
            self.group_checks["mismatched"] += 1

    def _remember(self, key: int, entry: RowGroup) -> None:
        self._vouch(key, entry)
        self._cache[key] = entry
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)

    def check(self, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[RowGroup]]:
        """Verify every document `samples` read that this process has not verified yet (sha256 against the
        view's tokens_sha256). A copy from the node-local cache that fails is dropped, fetched again from the
        store and counted (never served); a fetched copy that fails raises ChecksumMismatch. Returns (the row-group
        keys, each sample's index into them, the decoded row groups: the copies verified here)."""
        samples = np.asarray(samples, np.int64)
        of_sample = self.key[samples]
        keys = np.unique(of_sample)  # a window's few keys; each sample's index among them by binary search
        inverse = np.searchsorted(keys, of_sample)  # (np.unique's return_inverse argsorts: ~3x the time)
        key_list = keys.tolist()
        entries = [self.row_group_entry(k) for k in key_list]
        n_rows = np.array([len(e.verified) for e in entries], np.int64)
        if all(e.verified.all() for e in entries) and not np.any(self.row[samples] >= n_rows[inverse]):
            return keys, inverse, entries  # every row verified already: by its row group's digest, or read before
        for j, k in enumerate(key_list):
            s = samples[inverse == j] if len(keys) > 1 else samples
            entry = entries[j]
            name = lambda i, s=s: self.doc_ids[int(s[i])]  # noqa: E731
            try:
                verify_rows(entry, self.row[s], self.sha_bytes[s], name)
            except (ChecksumMismatch, MissingDocument):
                if not entry.from_cache:
                    raise
                fi, rg = int(k >> 32), int(k & 0xFFFFFFFF)
                where = entry.where.removesuffix(" (node cache)")
                entry = self.reader.refetch(
                    self.files[fi], rg, lambda table, _, w=where: decode_row_group(table, self.dtype, w)
                )
                self._remember(k, entry)
                verify_rows(entry, self.row[s], self.sha_bytes[s], name)
            entries[j] = entry
        return keys, inverse, entries

    def readahead_config(self) -> tuple[int, int] | None:
        """(bytes, threads) for a `loader.storage.Readahead` when row groups go through a node cache, else None."""
        cfg = self.storage
        if cfg is None or not cfg.cache_dir:
            return None
        if not (cfg.cache_local or any(f.startswith(("s3://", "s3a://", "s3n://")) for f in self.files)):
            return None
        return max(1, min(cfg.readahead_bytes, cfg.cache_bytes // 2)), cfg.readahead_threads

    def keys_of(self, samples: np.ndarray) -> list[int]:
        """The row-group keys of `samples`, in the order they are first needed."""
        keys = self.key[np.asarray(samples, np.int64)]
        _, first = np.unique(keys, return_index=True)
        return keys[np.sort(first)].tolist()

    def fetch_to_cache(self, key: int) -> int:
        """Bring row group `key` into the node cache (no decode); bytes fetched, 0 if it was there."""
        return self.reader.prefetch(self.files[int(key >> 32)], int(key & 0xFFFFFFFF))

    def read_stream(self, samples: np.ndarray) -> np.ndarray:
        """The tokens of `samples` back to back, in that order, every document verified (`check`): the rows of their
        row groups' token columns taken in that order by Arrow (`take` on the binary column copies each row's
        values with one memcpy: 0.33 ms for a 957K-token window of 8,192 documents, against 2.96 ms for an
        index per token with np.take), read-only."""
        samples = np.asarray(samples, np.int64)
        if not len(samples):
            return np.zeros(0, self.dtype)
        _, inverse, entries = self.check(samples)
        columns = [e.values for e in entries]
        column = columns[0] if len(columns) == 1 else pa.concat_arrays(columns)
        row_base = np.concatenate(([0], np.cumsum([len(c) for c in columns])[:-1]))
        rows = np.ascontiguousarray(row_base[inverse] + self.row[samples], dtype=np.int64)
        # from the buffer, not pa.array(): that imports pandas (~0.5 s of a training process's start-up)
        taken = column.take(pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)]))
        data, _ = contract.token_value_bytes(taken)
        return np.frombuffer(data, dtype=self.dtype) if len(data) else np.zeros(0, self.dtype)

    def read(self, sample_indices: Iterable[int]) -> dict[int, np.ndarray]:
        samples = np.array(sorted(set(int(i) for i in sample_indices)), dtype=np.int64)
        if not len(samples):
            return {}
        _, inverse, entries = self.check(samples)
        out = {}
        for s, j in zip(samples.tolist(), inverse.tolist(), strict=True):
            e, r = entries[j], int(self.row[s])
            out[s] = e.tokens[int(e.row_starts[r]) : int(e.row_starts[r + 1])]
        return out


@dataclass
class RunView:
    """A published run view ready to serve: manifest, samples (sample_index order), block ids, token source."""

    run_view_id: str
    status: str
    manifest: dict
    manifest_sha256: str
    samples: pa.Table
    block_ids: np.ndarray
    source: TokenSource
    origin: str = "catalog"  # catalog | bundle | memory

    def __post_init__(self) -> None:
        self.n_tokens = arrays.to_numpy(self.samples.column("n_tokens")).astype(np.int64)
        self.doc_ids: list[str] = self.samples.column("doc_id").to_pylist()

    @property
    def n_samples(self) -> int:
        return self.samples.num_rows

    @property
    def tokenizer_id(self) -> str:
        return self.manifest["tokenizer"]["tokenizer_id"]

    @property
    def seed(self) -> int:
        return int(self.manifest["seed"])

    @property
    def packing(self) -> dict:
        return dict(self.manifest["packing"])

    @property
    def epochs(self) -> int | None:
        return (self.manifest.get("epoch_policy") or {}).get("epochs")

    @property
    def tokens_per_epoch(self) -> int:
        return int(self.n_tokens.sum())


def parse_manifest(manifest_json: str, manifest_sha256: str, run_view_id: str) -> dict:
    """The manifest dict, after checking its bytes against the recorded hash."""
    actual = hashlib.sha256(manifest_json.encode("utf-8")).hexdigest()
    if actual != manifest_sha256:
        raise ManifestIntegrityError(
            f"run view {run_view_id}: manifest_json hashes to {actual}, the row records "
            f"{manifest_sha256}; the manifest was altered"
        )
    manifest = json.loads(manifest_json)
    for key in ("tokenizer", "seed", "packing", "samples", "inputs"):
        if key not in manifest:
            raise ManifestIntegrityError(
                f"run view {run_view_id}: manifest has no {key!r} (format {manifest.get('format')!r})"
            )
    return manifest


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
            superseded_by_request,
        )
    raise RunViewNotPublished(f"run view {run_view_id} has unknown status {status!r}")


def check_samples(run_view_id: str, manifest: Mapping, samples: pa.Table) -> None:
    """The samples table must be exactly what the manifest froze."""
    want = manifest["samples"]
    idx = arrays.to_numpy(samples.column("sample_index"))
    if samples.num_rows != want["n_samples"] or not np.array_equal(idx, np.arange(samples.num_rows)):
        raise SamplesMismatch(
            f"run view {run_view_id}: {samples.num_rows} sample rows (indices not 0..n-1 or "
            f"count differs), the manifest froze {want['n_samples']}"
        )
    n_tokens = int(arrays.to_numpy(samples.column("n_tokens")).astype(np.int64).sum())
    if n_tokens != want["n_tokens"]:
        raise SamplesMismatch(
            f"run view {run_view_id}: samples hold {n_tokens} tokens, the manifest {want['n_tokens']}"
        )
    digest = contract.samples_digest(samples)
    if digest != want["sha256"]:
        raise SamplesMismatch(f"run view {run_view_id}: samples digest {digest} != manifest {want['sha256']}")
    if samples.num_rows and int(arrays.to_numpy(samples.column("n_tokens")).min()) < 1:
        raise SamplesMismatch(f"run view {run_view_id}: a sample has no tokens")
    tids = set(samples.column("tokenizer_id").to_pylist())
    if tids - {manifest["tokenizer"]["tokenizer_id"]}:
        raise SamplesMismatch(
            f"run view {run_view_id}: samples use tokenizers {sorted(tids)}, the manifest "
            f"{manifest['tokenizer']['tokenizer_id']}"
        )


def layout_block_ids(repetition: np.ndarray, file_index: np.ndarray, row_group: np.ndarray) -> np.ndarray:
    """One block per (repetition, file, row group), numbered in that sort order."""
    rep, fi, rg = (np.asarray(a, np.int64) for a in (repetition, file_index, row_group))
    if not len(rep):
        return np.zeros(0, np.int64)
    n_fi, n_rg = int(fi.max()) + 1, int(rg.max()) + 1
    key = (rep * n_fi + fi) * n_rg + rg  # the same order as sorting the triples, as one integer (10x faster)
    _, inverse = np.unique(key, return_inverse=True)
    return inverse.reshape(-1).astype(np.int64)


def _view_from_layout(
    run_view_id: str,
    status: str,
    manifest: dict,
    sha: str,
    samples: pa.Table,
    files: Sequence[str],
    io_properties: Mapping[str, str],
    origin: str,
    max_cached_row_groups: int = DEFAULT_CACHED_ROW_GROUPS,
    storage=None,
    group_sha256: Mapping[int, bytes] | None = None,
) -> RunView:
    fi = arrays.to_numpy(samples.column("file_index")).astype(np.int64)
    rg = arrays.to_numpy(samples.column("row_group")).astype(np.int64)
    row = arrays.to_numpy(samples.column("row")).astype(np.int64)
    source = RowGroupSource(
        tuple(files),
        fi,
        rg,
        row,
        samples.column("doc_id").to_pylist(),
        samples.column("tokens_sha256").to_pylist(),
        dict(io_properties),
        max_cached=max_cached_row_groups,
        run_view_id=run_view_id,
        token_dtype=manifest["tokenizer"].get("token_dtype", "uint16"),
        storage=storage,
        group_sha256=group_sha256,
    )
    blocks = layout_block_ids(arrays.to_numpy(samples.column("repetition")), fi, rg)
    return RunView(run_view_id, status, manifest, sha, samples.select(SAMPLE_COLUMNS), blocks, source, origin)


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

    def locate(self, manifest: Mapping, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
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

    def locate(self, manifest: Mapping, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
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


def read_layout(blob: bytes, sha256: str, run_view_id: str, manifest: Mapping, n_samples: int, where: str):
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
            if layout.manifest_sha256 != contract.manifest_sha256(manifest):
                problem = f"was made for manifest {layout.manifest_sha256}"
            elif layout.samples_sha256 != manifest["samples"]["sha256"] or len(layout.row) != n_samples:
                problem = f"was made for other samples ({len(layout.row)} rows, digest {layout.samples_sha256})"
            elif len(layout.row) and int(layout.file_index.max()) >= len(layout.files):
                problem = "names a file index past its file list"
    if problem is None:
        return layout
    log.warning("run view %s: layout %s %s; locating its documents instead", run_view_id, where, problem)
    return None


def _published_layout(tables, run_view_id: str, manifest: Mapping, samples: pa.Table, properties):
    """(layout, FileIO properties of the token files) when the view was published with a layout, else None."""
    pointer = properties.get(contract.layout_property(run_view_id))
    if not pointer:
        return None
    sha, _, path = pointer.partition(" ")
    snapshot_id = manifest["inputs"].get(TOKENS_TABLE)
    if snapshot_id is None or not tables.has_snapshot(TOKENS_TABLE, int(snapshot_id)):
        return None  # the locating path raises the named error
    try:
        blob = tables.read_file(TOKENS_TABLE, path)
    except (OSError, FileNotFoundError) as e:
        log.warning("run view %s: layout %s unreadable (%s); locating its documents instead", run_view_id, path, e)
        return None
    layout = read_layout(blob, sha, run_view_id, manifest, samples.num_rows, path)
    return None if layout is None else (layout, tables.io_properties(TOKENS_TABLE))


def _locate_documents(table, manifest: Mapping, samples: pa.Table) -> tuple[list[str], pa.Table, dict]:
    """Find each sample's document in the pinned token files (`table`: tokenized.documents through pyiceberg):
    (sorted file paths, samples + layout columns, FileIO properties)."""
    from pyiceberg.expressions import And, EqualTo, In

    snapshot_id = manifest["inputs"].get(TOKENS_TABLE)
    if snapshot_id is None or table.snapshot_by_id(int(snapshot_id)) is None:
        raise MissingDocument(
            f"{TOKENS_TABLE} has no snapshot {snapshot_id} (pinned by the manifest): it "
            f"was expired; a published view's tag should have kept it"
        )
    segments = sorted(set(samples.column("segment").to_pylist()))
    where = EqualTo("tokenizer_id", manifest["tokenizer"]["tokenizer_id"])
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


def with_locations(samples: pa.Table, file_index, row_group, row) -> pa.Table:
    """`samples` plus its layout columns file_index, row_group, row (int32)."""
    return (
        samples.append_column("file_index", arrays.numeric(file_index, pa.int32()))
        .append_column("row_group", arrays.numeric(row_group, pa.int32()))
        .append_column("row", arrays.numeric(row, pa.int32()))
    )


LAYOUT_CACHE_ENV = "TOKENLAKE_LAYOUT_CACHE"
_LAYOUT_COLUMNS = ("file_index", "row_group", "row")


def _layout_path(manifest: Mapping, snapshot_id, files: Sequence[str]) -> Path | None:
    """Where this node keeps the located layout of a view (TOKENLAKE_LAYOUT_CACHE; unset: nowhere). The key
    covers the manifest, the pinned snapshot and the token files, all immutable, so an entry never goes stale."""
    root = os.environ.get(LAYOUT_CACHE_ENV)
    if not root:
        return None
    key = hashlib.sha256(json.dumps([contract.manifest_sha256(manifest), str(snapshot_id), list(files)]).encode())
    return Path(root) / f"layout-{key.hexdigest()[:32]}.npy"


def _cached_layout(manifest: Mapping, snapshot_id, files: Sequence[str], samples: pa.Table) -> pa.Table | None:
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


def _store_layout(manifest: Mapping, snapshot_id, files: Sequence[str], with_layout: pa.Table) -> None:
    path = _layout_path(manifest, snapshot_id, files)
    if path is None:
        return
    body = np.stack([with_layout.column(c).to_numpy().astype("<i4") for c in _LAYOUT_COLUMNS]).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(hashlib.sha256(body).digest() + body)
    os.replace(tmp, path)


def _published_from_catalog(catalog: Lakehouse | Catalog | None, run_view_id: str):
    """(manifests row, manifest, token files, samples with their row-group layout, file IO properties, layout) of
    a published view, every check on the way (status, manifest hash, samples digest at the view's tag). An
    embedded catalog is read from its metadata files when it can be (`_MetadataTables`), else through pyiceberg."""
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


def _read_published(tables, run_view_id: str):
    row = _manifest_row(tables, run_view_id)
    check_status(run_view_id, row["status"], row.get("superseded_by_request"))
    manifest = parse_manifest(row["manifest_json"], row["manifest_sha256"], run_view_id)
    samples, properties = _pinned_samples(tables, run_view_id)
    check_samples(run_view_id, manifest, samples)
    published = _published_layout(tables, run_view_id, manifest, samples, properties)
    if published is not None:
        layout, props = published
        with_layout = with_locations(samples, layout.file_index, layout.row_group, layout.row)
        return row, manifest, list(layout.files), with_layout, props, layout
    files, with_layout, props = tables.locate(manifest, samples)
    return row, manifest, files, with_layout, props, None


def open_run_view(
    run_view_id: str | None = None,
    *,
    catalog: Lakehouse | Catalog | None = None,
    bundle: str | Path | None = None,
    io_properties: Mapping[str, str] | None = None,
    max_cached_row_groups: int = DEFAULT_CACHED_ROW_GROUPS,
    storage=None,
) -> RunView:
    """Open a published run view by id from the lakehouse (`catalog`: a `Lakehouse`, a pyiceberg catalog, or
    None for the configured one), or from an exported bundle directory; refuses candidate, rejected and
    superseded views with named errors. `storage` (loader.storage.StorageConfig): timeouts, retries and the
    node-local cache for token objects on object storage."""
    if bundle is not None:
        return _open_bundle(Path(bundle), run_view_id, io_properties or {}, max_cached_row_groups, storage)
    if not run_view_id:
        raise ValueError("give a run_view_id (catalog) or bundle=<exported directory>")
    row, manifest, files, with_layout, props, layout = _published_from_catalog(catalog, run_view_id)
    if io_properties:
        props = {**props, **io_properties}
    return _view_from_layout(
        run_view_id,
        row["status"],
        manifest,
        row["manifest_sha256"],
        with_layout,
        files,
        props,
        "catalog",
        max_cached_row_groups,
        storage,
        None if layout is None else layout.group_digests(),
    )


# --- bundles ----------------------------------------------------------------------------------------------


def export_run_view(run_view_id: str, out_dir: str | Path, *, catalog: Lakehouse | Catalog | None = None) -> Path:
    """Write a published view's bundle (manifest.json, run_view.json, samples.parquet) to `out_dir` for a
    cluster without catalog access; returns the directory."""
    row, manifest, files, with_layout, _, layout = _published_from_catalog(catalog, run_view_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").write_bytes(row["manifest_json"].encode("utf-8"))
    pq.write_table(with_layout, out / "samples.parquet")
    layout_sha = None
    if layout is not None:  # the published row-group digests travel with the bundle
        blob = layout.encode()
        (out / "layout.bin").write_bytes(blob)
        layout_sha = hashlib.sha256(blob).hexdigest()
    (out / "run_view.json").write_text(
        json.dumps(
            {
                "format": BUNDLE_FORMAT,
                "run_view_id": run_view_id,
                "status": row["status"],
                "manifest_sha256": row["manifest_sha256"],
                "token_files": files,
                "tokens_snapshot_id": manifest["inputs"].get(TOKENS_TABLE),
                "layout_sha256": layout_sha,
                "exported_at": dt.datetime.now(dt.UTC).isoformat(),
            },
            indent=1,
            sort_keys=True,
        )
    )
    return out


def _open_bundle(
    path: Path, run_view_id: str | None, io_properties: Mapping[str, str], max_cached_row_groups: int, storage=None
) -> RunView:
    meta_path = path / "run_view.json"
    if not meta_path.is_file():
        raise RunViewNotFound(
            f"{str(path)!r} is not a run view bundle (no run_view.json); create one with loader.export_run_view"
        )
    meta = json.loads(meta_path.read_text())
    if meta.get("format") != BUNDLE_FORMAT:
        raise ManifestIntegrityError(
            f"bundle {str(path)!r} has format {meta.get('format')!r}, expected {BUNDLE_FORMAT}"
        )
    rid = meta["run_view_id"]
    if run_view_id is not None and run_view_id != rid:
        raise RunViewNotFound(f"bundle {str(path)!r} holds run view {rid}, not {run_view_id}")
    check_status(rid, meta["status"])
    manifest = parse_manifest((path / "manifest.json").read_bytes().decode("utf-8"), meta["manifest_sha256"], rid)
    samples = pq.read_table(path / "samples.parquet")
    check_samples(rid, manifest, samples)
    digests = None
    if meta.get("layout_sha256") and (path / "layout.bin").is_file():
        blob = (path / "layout.bin").read_bytes()
        layout = read_layout(blob, meta["layout_sha256"], rid, manifest, samples.num_rows, str(path / "layout.bin"))
        # the digests vouch for whole row groups, so the rows they are used for must be the published ones
        same = layout is not None and list(layout.files) == list(meta["token_files"])
        for name in ("file_index", "row_group", "row") if same else ():
            same = same and np.array_equal(samples.column(name).to_numpy(), getattr(layout, name))
        if same:
            digests = layout.group_digests()
        elif layout is not None:
            log.warning("bundle %s: samples.parquet's layout differs from layout.bin; checksumming per document", path)
    return _view_from_layout(
        rid,
        meta["status"],
        manifest,
        meta["manifest_sha256"],
        samples,
        meta["token_files"],
        io_properties,
        "bundle",
        max_cached_row_groups,
        storage,
        digests,
    )


# --- in memory --------------------------------------------------------------------------------------------


def in_memory_view(
    docs: Sequence[np.ndarray],
    *,
    seq_len: int,
    eos_id: int,
    seed: int = 0,
    cross_document_attention: str = "masked",
    tokenizer_id: str = "in-memory",
    token_dtype: str = "uint16",
    epochs: int | None = None,
    block_size: int = 16,
    doc_ids: Sequence[str] | None = None,
    name: str = "memory",
) -> RunView:
    """A published-like view over token arrays in memory (each should end with `eos_id`); doc ids default to
    doc-<i>, and the manifest follows the run view contract so state and audit work unchanged."""
    dtype = contract.token_dtype(token_dtype)
    data = [np.asarray(d, dtype=dtype).tobytes() for d in docs]
    ids = list(doc_ids) if doc_ids is not None else [f"doc-{i:06d}" for i in range(len(docs))]
    if len(set(ids)) != len(ids):
        raise ValueError(
            "in_memory_view: doc_ids must be unique (repeat a document by listing it twice with different ids)"
        )
    shas = [hashlib.sha256(b).hexdigest() for b in data]
    n = pa.array([len(d) for d in docs], pa.int32())
    samples = pa.table(
        {
            "sample_index": pa.array(range(len(docs)), pa.int64()),
            "doc_id": ids,
            "tokenizer_id": [tokenizer_id] * len(ids),
            "crawl": ["memory"] * len(ids),
            "segment": ["0"] * len(ids),
            "component": ["all"] * len(ids),
            "repetition": pa.array([0] * len(ids), pa.int32()),
            "n_tokens": n,
            "tokens_sha256": shas,
        }
    )
    manifest = {
        "format": contract.FORMAT,
        "name": name,
        "tokenizer": {
            "tokenizer_id": tokenizer_id,
            "name": tokenizer_id,
            "vocab_size": None,
            "eos_id": eos_id,
            "token_dtype": token_dtype,
        },
        "inputs": {TOKENS_TABLE: None},
        "seed": seed,
        "epoch_policy": {"epochs": epochs, "shuffle": "block"},
        "packing": {"seq_len": seq_len, "eos_id": eos_id, "cross_document_attention": cross_document_attention},
        "samples": {
            "n_samples": len(ids),
            "n_tokens": int(sum(len(d) for d in docs)),
            "sha256": contract.samples_digest(samples),
        },
    }
    sha = contract.manifest_sha256(manifest)
    source = InMemorySource(dict(zip(ids, data, strict=True)), ids, shas, token_dtype)
    return RunView(
        contract.run_view_id(name, sha),
        "published",
        manifest,
        sha,
        samples,
        chunk_blocks(len(ids), block_size),
        source,
        "memory",
    )
