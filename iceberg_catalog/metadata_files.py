"""A table's committed state read straight from its metadata files, without pyiceberg: for training processes.

An Iceberg table's state is one immutable metadata JSON file (snapshots, refs, properties); a snapshot's data files
are listed by its manifest list and manifests (Avro object container files). A training process reads three
small tables to open its run view; importing pyiceberg for that (its table, catalog, Avro and pydantic modules)
costs ~0.35 s of a fresh process's time to the first batch, more than opening the view itself. `TableState` reads
what the loader needs with the standard library and pyarrow-free Python: the snapshot of a ref or id, properties,
and the live data files of a snapshot (path, row count).

It supports what this project's tables are: format version 1 or 2, manifest lists, Avro codecs null and deflate,
data files only. Anything else (delete files, format version 3, another codec, a v1 snapshot without a manifest
list) raises `UnsupportedTableState`, and the caller reads the table with pyiceberg instead; the two never
disagree on a supported table (tests compare them on every table of a real lakehouse). Local files only (the
embedded catalog's warehouse); object storage goes through pyiceberg's FileIO.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlparse

AVRO_MAGIC = b"Obj\x01"
GZIP_MAGIC = b"\x1f\x8b"
SUPPORTED_FORMAT_VERSIONS = (1, 2)
STATUS_DELETED = 2  # manifest entry status: 0 existing, 1 added, 2 deleted
CONTENT_DATA = 0  # manifest (list) content: 0 data, 1 deletes; data file content: 0 data, 1/2 deletes


class UnsupportedTableState(Exception):
    """The table uses something this reader does not read (the caller reads it with pyiceberg)."""


class NoSuchTable(LookupError):
    """The catalog has no such table."""


def local_path(uri: str) -> str | None:
    """The absolute local path of a `file://` URI or a plain path; None for object stores and names."""
    if uri.startswith("file://"):
        return unquote(urlparse(uri).path).rstrip("/")
    return uri.rstrip("/") if uri.startswith("/") else None


def read_local(location: str) -> bytes:
    path = local_path(location)
    if path is None:
        raise UnsupportedTableState(f"{location!r} is not a local file")
    with open(path, "rb") as f:
        return f.read()


def catalog_pointer(db: str, catalog_name: str, identifier: str | tuple[str, ...]) -> str:
    """The current metadata file of a table of an embedded SQLite catalog (pyiceberg's `iceberg_tables`, the
    Iceberg JDBC catalog layout), read with sqlite3 on the database opened read-only."""
    parts = tuple(identifier.split(".")) if isinstance(identifier, str) else tuple(identifier)
    namespace, name = ".".join(parts[:-1]), parts[-1]
    with closing(sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True)) as con:
        row = con.execute(
            "SELECT metadata_location FROM iceberg_tables "
            "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (catalog_name, namespace, name),
        ).fetchone()
    if row is None or not row[0]:
        raise NoSuchTable(f"Table does not exist: {namespace}.{name} (catalog {catalog_name!r}, {db})")
    return str(row[0])


# --- Avro object container files ---------------------------------------------------------------------------------


class _Buf:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def long(self) -> int:
        data, pos = self.data, self.pos
        b = data[pos]
        n, shift = b & 0x7F, 7
        pos += 1
        while b & 0x80:
            b = data[pos]
            n |= (b & 0x7F) << shift
            shift += 7
            pos += 1
        self.pos = pos
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"Avro: {n} bytes at {self.pos} overrun a {len(self.data)}-byte block")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out


Reader = Callable[[_Buf], Any]


def _blocks(buf: _Buf) -> Iterator[int]:
    """Item counts of an array's or map's blocks (a negative count is followed by the block's byte size)."""
    while True:
        n = buf.long()
        if n == 0:
            return
        if n < 0:
            buf.long()
            n = -n
        yield n


def _compile(schema: Any, named: dict[str, Any]) -> Reader:
    """A reader of one value of `schema` (Avro's JSON schema form; records as dicts)."""
    if isinstance(schema, list):
        branches = [_compile(s, named) for s in schema]
        return lambda buf: branches[buf.long()](buf)
    if isinstance(schema, str):
        if schema in named:
            return named[schema]
        schema = {"type": schema}
    kind = schema["type"]
    if isinstance(kind, list | dict):
        return _compile(kind, named)
    simple = {
        "null": lambda buf: None,
        "boolean": lambda buf: buf.take(1) != b"\x00",
        "int": _Buf.long,
        "long": _Buf.long,
        "float": lambda buf: struct.unpack("<f", buf.take(4))[0],
        "double": lambda buf: struct.unpack("<d", buf.take(8))[0],
        "bytes": lambda buf: buf.take(buf.long()),
        "string": lambda buf: buf.take(buf.long()).decode("utf-8"),
    }
    if kind in simple:
        return simple[kind]
    if kind == "fixed":
        size = int(schema["size"])
        reader = lambda buf: buf.take(size)  # noqa: E731
    elif kind == "enum":
        symbols = list(schema["symbols"])
        reader = lambda buf: symbols[buf.long()]  # noqa: E731
    elif kind == "array":
        item = _compile(schema["items"], named)
        reader = lambda buf: [item(buf) for n in _blocks(buf) for _ in range(n)]  # noqa: E731
    elif kind == "map":
        value = _compile(schema["values"], named)
        read_key = simple["string"]
        reader = lambda buf: {read_key(buf): value(buf) for n in _blocks(buf) for _ in range(n)}  # noqa: E731
    elif kind == "record":
        fields: list[tuple[str, Reader]] = []

        def reader(buf: _Buf) -> dict:
            return {name: read(buf) for name, read in fields}

        if "name" in schema:
            named[schema["name"]] = reader  # before the fields: a record may refer to itself
        fields.extend((f["name"], _compile(f["type"], named)) for f in schema["fields"])
        return reader
    elif kind in named:
        return named[kind]
    else:
        raise UnsupportedTableState(f"Avro type {kind!r} is not supported")
    if "name" in schema:
        named[schema["name"]] = reader
    return reader


def read_avro(data: bytes) -> tuple[dict[str, bytes], list[Any]]:
    """(file metadata, every record) of an Avro object container file."""
    if data[:4] != AVRO_MAGIC:
        raise UnsupportedTableState("not an Avro object container file")
    buf = _Buf(data)
    buf.pos = 4
    meta = {buf.take(buf.long()).decode(): buf.take(buf.long()) for n in _blocks(buf) for _ in range(n)}
    sync = buf.take(16)
    codec = meta.get("avro.codec", b"null").decode()
    if codec not in ("null", "deflate"):
        raise UnsupportedTableState(f"Avro codec {codec!r} is not supported")
    read = _compile(json.loads(meta["avro.schema"]), {})
    records: list[Any] = []
    while buf.pos < len(data):
        count, size = buf.long(), buf.long()
        block = buf.take(size)
        if codec == "deflate":
            block = zlib.decompress(block, -15)
        inner = _Buf(block)
        records.extend(read(inner) for _ in range(count))
        if buf.take(16) != sync:
            raise ValueError("Avro: a block does not end with the file's sync marker")
    return meta, records


# --- table metadata ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataFile:
    path: str
    record_count: int


class TableState:
    """One committed metadata file of a table: snapshots, refs, properties and the data files of a snapshot."""

    def __init__(self, location: str, metadata: dict, read: Callable[[str], bytes] = read_local) -> None:
        version = metadata.get("format-version")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise UnsupportedTableState(f"{location}: format version {version!r}")
        self.location, self.metadata, self._read = location, metadata, read
        self._snapshots = {int(s["snapshot-id"]): s for s in metadata.get("snapshots") or []}

    @classmethod
    def load(cls, metadata_location: str, read: Callable[[str], bytes] = read_local) -> TableState:
        data = read(metadata_location)
        if data[:2] == GZIP_MAGIC:  # write.metadata.compression-codec=gzip
            data = gzip.decompress(data)
        return cls(metadata_location, json.loads(data), read)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.metadata.get("properties") or {})

    @property
    def current_snapshot_id(self) -> int | None:
        sid = self.metadata.get("current-snapshot-id")
        return None if sid is None or int(sid) == -1 else int(sid)

    def has_snapshot(self, snapshot_id: int) -> bool:
        return int(snapshot_id) in self._snapshots

    def ref_snapshot_id(self, name: str) -> int | None:
        """The snapshot a branch or tag points at (None: no such ref)."""
        ref = (self.metadata.get("refs") or {}).get(name)
        return None if ref is None else int(ref["snapshot-id"])

    def data_files(self, snapshot_id: int | None) -> list[DataFile]:
        """The live data files of a snapshot (none for None: a table never written). Raises
        UnsupportedTableState when the snapshot has delete files."""
        if snapshot_id is None:
            return []
        snap = self._snapshots.get(int(snapshot_id))
        if snap is None:
            raise KeyError(f"{self.location}: no snapshot {snapshot_id}")
        if "manifest-list" not in snap:
            raise UnsupportedTableState(f"{self.location}: snapshot {snapshot_id} has no manifest list")
        out = []
        for manifest in read_avro(self._read(snap["manifest-list"]))[1]:
            content = manifest.get("content") or CONTENT_DATA
            _, entries = read_avro(self._read(manifest["manifest_path"]))
            for entry in entries:
                if entry["status"] == STATUS_DELETED:
                    continue
                f = entry["data_file"]
                if content != CONTENT_DATA or (f.get("content") or CONTENT_DATA) != CONTENT_DATA:
                    raise UnsupportedTableState(f"{self.location}: snapshot {snapshot_id} has delete files")
                out.append(DataFile(f["file_path"], int(f["record_count"])))
        return out
