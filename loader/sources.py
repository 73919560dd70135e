"""Where a run view's tokens come from: sources that hand out verified token arrays by sample index.

`RowGroupSource` reads whole Parquet row groups of the pinned token files (local, FileIO or S3 through a node-local
cache, `loader.storage`), keeps the last few decoded in memory and checksums every document once (or a whole row
group at once against the digest published with the view's layout); `read_stream` hands a segment's tokens back to
back in serving order. `InMemorySource` holds token bytes in memory (`loader.view.in_memory_view`) and verifies them
on every read the same way.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa

from iceberg_catalog import run_view_contract as contract
from loader.errors import ChecksumMismatch, MissingDocument, UnsupportedLayout

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
            doc_id=doc_id,
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
            doc_id=doc,
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
