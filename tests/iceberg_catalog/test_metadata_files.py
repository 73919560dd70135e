"""A table's state read from its metadata files (what a training process reads instead of importing pyiceberg)
equals what pyiceberg reads, on every table and snapshot of a real lakehouse; what it does not support is refused
as UnsupportedTableState, never misread."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest

from iceberg_catalog import TABLES, CatalogConfig, open_catalog
from iceberg_catalog.metadata_files import (
    NoSuchTable,
    TableState,
    UnsupportedTableState,
    catalog_pointer,
    local_path,
    read_avro,
)
from tests.loader import views


def test_every_snapshot_of_every_table_lists_the_data_files_pyiceberg_plans():
    config = CatalogConfig.embedded(views.lakehouse()["home"])
    sql = open_catalog(config, create=False)
    snapshots = files = tags = 0
    for ident in TABLES:
        table = sql.load_table(ident)
        pointer = catalog_pointer(str(config.sqlite_path), config.name, ident)
        assert pointer == table.metadata_location
        state = TableState.load(pointer)
        assert state.properties == dict(table.properties)  # the views' layout pointers among them
        current = table.current_snapshot()
        assert state.current_snapshot_id == (current.snapshot_id if current else None)
        for name in table.metadata.refs:
            assert state.ref_snapshot_id(name) == table.snapshot_by_name(name).snapshot_id
            tags += name != "main"
        for snap in table.snapshots():
            assert state.has_snapshot(snap.snapshot_id)
            ours = sorted((f.path, f.record_count) for f in state.data_files(snap.snapshot_id))
            theirs = sorted(
                (t.file.file_path, t.file.record_count) for t in table.scan(snapshot_id=snap.snapshot_id).plan_files()
            )
            assert ours == theirs, (ident, snap.snapshot_id)
            snapshots += 1
            files += len(ours)
    assert snapshots > 10 and files > 10 and tags >= 2  # the comparison covered real history, the views' tags
    assert state.ref_snapshot_id("no-such-tag") is None and not state.has_snapshot(1)
    with pytest.raises(NoSuchTable, match="nope.missing"):
        catalog_pointer(str(config.sqlite_path), config.name, "nope.missing")


# --- a minimal Avro writer for hand-made files --------------------------------------------------------------------


def _long(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return _long(len(b)) + b


SYNC = bytes(range(16))
LIST_SCHEMA = {"type": "record", "name": "manifest_file", "fields": [
    {"name": "manifest_path", "type": "string"}, {"name": "content", "type": "int"}]}  # fmt: skip
ENTRY_SCHEMA = {"type": "record", "name": "manifest_entry", "fields": [
    {"name": "status", "type": "int"},
    {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
        {"name": "content", "type": "int"}, {"name": "file_path", "type": "string"},
        {"name": "record_count", "type": "long"}]}}]}  # fmt: skip


def avro_file(schema: dict, records: list[bytes], codec: str = "deflate", sync: bytes = SYNC) -> bytes:
    body = b"".join(records)
    if codec == "deflate":
        c = zlib.compressobj(wbits=-15)
        body = c.compress(body) + c.flush()
    meta = {"avro.schema": json.dumps(schema), "avro.codec": codec}
    head = b"Obj\x01" + _long(len(meta)) + b"".join(_str(k) + _str(v) for k, v in meta.items()) + _long(0) + SYNC
    return head + _long(len(records)) + _long(len(body)) + body + sync


def table_of(manifests: dict[str, tuple[int, list[tuple[int, int, str, int]]]], version: int = 2) -> TableState:
    """A table of one snapshot whose manifest list names `manifests` (path -> (content, entries))."""
    files = {
        "/t/list.avro": avro_file(LIST_SCHEMA, [_str(p) + _long(c) for p, (c, _) in manifests.items()]),
        **{
            p: avro_file(ENTRY_SCHEMA, [_long(s) + _long(fc) + _str(f) + _long(n) for s, fc, f, n in entries])
            for p, (_, entries) in manifests.items()
        },
    }
    meta = {"format-version": version, "snapshots": [{"snapshot-id": 7, "manifest-list": "/t/list.avro"}]}
    return TableState("/t/meta.json", meta, files.__getitem__)


def test_live_entries_are_listed_and_deleted_ones_skipped():
    state = table_of({"/t/m1.avro": (0, [(1, 0, "/t/a.parquet", 3), (2, 0, "/t/gone.parquet", 5)]),
                      "/t/m2.avro": (0, [(0, 0, "/t/b.parquet", 4)])})  # fmt: skip
    assert [(f.path, f.record_count) for f in state.data_files(7)] == [("/t/a.parquet", 3), ("/t/b.parquet", 4)]
    assert state.data_files(None) == []
    with pytest.raises(KeyError, match="no snapshot 8"):
        state.data_files(8)


@pytest.mark.parametrize(
    "manifests",
    [
        {"/t/d.avro": (1, [(1, 1, "/t/pos-deletes.parquet", 2)])},  # a delete manifest
        {"/t/m.avro": (0, [(1, 2, "/t/eq-deletes.parquet", 2)])},  # a delete file listed as data content 2
    ],
)
def test_delete_files_are_refused_not_skipped(manifests):
    with pytest.raises(UnsupportedTableState, match="delete files"):
        table_of(manifests).data_files(7)


def test_other_format_versions_codecs_and_broken_files_are_refused():
    with pytest.raises(UnsupportedTableState, match="format version 3"):
        table_of({}, version=3)
    with pytest.raises(UnsupportedTableState, match="codec 'snappy'"):
        read_avro(avro_file(LIST_SCHEMA, [], codec="snappy"))
    with pytest.raises(UnsupportedTableState, match="not an Avro"):
        read_avro(b"PAR1")
    with pytest.raises(ValueError, match="sync marker"):
        read_avro(avro_file(LIST_SCHEMA, [_str("/t/m.avro") + _long(0)], sync=b"x" * 16))
    meta = {"format-version": 1, "snapshots": [{"snapshot-id": 7, "manifests": ["/t/m.avro"]}]}
    with pytest.raises(UnsupportedTableState, match="no manifest list"):
        TableState("/t/meta.json", meta).data_files(7)


def test_gzip_compressed_metadata_reads_the_same(tmp_path):
    config = CatalogConfig.embedded(views.lakehouse()["home"])
    pointer = catalog_pointer(str(config.sqlite_path), config.name, "run_view.samples")
    plain = TableState.load(pointer)
    packed = tmp_path / "00001-x.gz.metadata.json"
    packed.write_bytes(gzip.compress(Path(local_path(pointer)).read_bytes()))
    state = TableState.load(str(packed))
    assert state.metadata == plain.metadata
    assert state.data_files(state.current_snapshot_id) == plain.data_files(plain.current_snapshot_id)
