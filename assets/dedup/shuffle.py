"""Hash-partitioned scratch files: how the near-dedup stages hand rows to each other without any one process
holding them all. A task writes ONE Parquet file per output, one row group per destination partition
(`write_parts`); the next stage's task p reads only the row groups of partition p from every file
(`read_part`). Files live under the run's scratch folder in the warehouse (local or S3, through the
lakehouse's FileIO), are named by the stage and task that wrote them (a retried task overwrites what a killed
attempt left), and are deleted after the commit.

A document is named by its key, `crawl + "\\0" + doc_id`: byte order of keys is the canonical (crawl, doc_id)
order (no crawl name contains NUL), so min and sort on keys give the earliest crawl's smallest doc_id. No Dagster.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from assets.dedup.minhash import byte_string_hashes

SEP = "\x00"
PARTS_KEY = b"tokenlake.parts"  # file metadata: the partition of each row group, in order


def keys(crawls: pa.Array | pa.ChunkedArray, doc_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Document keys: crawl NUL doc_id."""
    return pc.binary_join_element_wise(crawls.cast(pa.string()), doc_ids.cast(pa.string()), SEP)


def split_keys(k: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """(crawls, doc_ids) of document keys."""
    parts = pc.split_pattern(k, SEP, max_splits=1)
    return pc.list_element(parts, 0), pc.list_element(parts, 1)


def partition_of(k: pa.Array | pa.ChunkedArray, n_parts: int) -> np.ndarray:
    """A stable hash partition in [0, n_parts) of each string (the same on every machine and run)."""
    if n_parts == 1 or len(k) == 0:
        return np.zeros(len(k), np.int64)
    arr = pa.array(k, pa.large_string()) if not isinstance(k, pa.ChunkedArray) else k.combine_chunks()
    arr = arr.cast(pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.empty(0, np.uint8)
    h = byte_string_hashes(data, offsets[:-1].astype(np.intp), offsets[1:].astype(np.intp))
    return (h % np.uint64(n_parts)).astype(np.int64)


def write_parts(io: FileIO, path: str, table: pa.Table, parts: np.ndarray) -> str:
    """Write `table` to the file `path` (replacing it), its rows grouped by `parts` (one row group per
    partition present, rows in their order within a partition); returns the path."""
    order = np.argsort(parts, kind="stable")
    table, parts = table.take(pa.array(order)), parts[order]
    bounds = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1]]) if len(parts) else np.empty(0, np.int64)
    present = parts[bounds].tolist() if len(parts) else []
    schema = table.schema.with_metadata({PARTS_KEY: json.dumps(present).encode()})
    with io.new_output(path).create(overwrite=True) as stream, pq.ParquetWriter(stream, schema) as writer:
        ends = np.r_[bounds[1:], len(parts)] if len(parts) else []
        for start, end in zip(bounds, ends):
            writer.write_table(table.slice(int(start), int(end - start)), row_group_size=int(end - start))
        if not present:
            writer.write_table(table)
    return path


def read_part(io: FileIO, paths: Sequence[str], part: int, schema: pa.Schema) -> pa.Table:
    """The rows of partition `part` from every file of `paths` (in path order), as `schema`."""
    tables = []
    for path in paths:
        with io.new_input(path).open(seekable=True) as f:
            pf = pq.ParquetFile(f)
            present = json.loads(pf.schema_arrow.metadata[PARTS_KEY])
            if part in present:
                tables.append(pf.read_row_group(present.index(part)).replace_schema_metadata())
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def delete_all(io: FileIO, paths: Sequence[str]) -> None:
    """Remove scratch files (after the commit; a missing one is fine)."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
