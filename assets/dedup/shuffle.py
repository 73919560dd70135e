"""Hash-partitioned scratch files: how the near-dedup stages hand rows to each other without any one process
holding them all. A task writes ONE Parquet file per output, its rows in row groups of one destination
partition each (`PartWriter`, `write_parts`); the next stage's task p reads only the row groups of partition p
from every file (`read_part`). Files live under the run's scratch folder in the warehouse (local or S3, through the
lakehouse's FileIO), are named by the stage and task that wrote them (a retried task overwrites what a killed
attempt left), and are deleted after the commit.

A document is named by its key, `crawl + "\\0" + doc_id`: byte order of keys is the canonical (crawl, doc_id)
order (no crawl name contains NUL), so min and sort on keys give the earliest crawl's smallest doc_id. No Dagster.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO

from assets.dedup.minhash import byte_string_hashes

SEP = "\x00"
PART = "_part"  # the column holding a row group's destination partition


def keys(crawls: pa.Array | pa.ChunkedArray, doc_ids: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Document keys: crawl NUL doc_id."""
    return pc.binary_join_element_wise(crawls.cast(pa.string()), doc_ids.cast(pa.string()), SEP)


def split_keys(k: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """(crawls, doc_ids) of document keys."""
    parts = pc.split_pattern(k, SEP, max_splits=1)
    return pc.list_element(parts, 0), pc.list_element(parts, 1)


HASH_CHUNK = 8192  # keys hashed together: the hash's power tables grow with the bytes of one call


def partition_of(k: pa.Array | pa.ChunkedArray, n_parts: int) -> np.ndarray:
    """A stable hash partition in [0, n_parts) of each string (the same on every machine and run)."""
    if n_parts == 1 or len(k) == 0:
        return np.zeros(len(k), np.int64)
    return (string_hashes(k) % np.uint64(n_parts)).astype(np.int64)


def string_hashes(k: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Stable 64-bit hashes (uint64) of strings (a null hashes as the empty string)."""
    arr = (k.combine_chunks() if isinstance(k, pa.ChunkedArray) else k).cast(pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.empty(0, np.uint8)
    out = np.empty(len(arr), np.uint64)
    for lo in range(0, len(arr), HASH_CHUNK):
        bounds = offsets[lo : lo + HASH_CHUNK + 1]
        chunk = data[bounds[0] : bounds[-1]]
        rel = (bounds - bounds[0]).astype(np.intp)
        out[lo : lo + len(rel) - 1] = byte_string_hashes(chunk, rel[:-1], rel[1:])
    return out


def ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every k repeated counts[k] times, beside starts[k], starts[k] + 1, ..., starts[k] + counts[k] - 1."""
    which = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    offsets = np.cumsum(counts) - counts
    return which, np.repeat(np.asarray(starts, np.int64) - offsets, counts) + np.arange(len(which), dtype=np.int64)


class Matcher:
    """Exact lookup of strings in a fixed set of distinct strings, by their sorted 64-bit hashes, every hash hit
    confirmed by comparing the strings: a batch costs O(batch x log set). `pc.is_in` and a hash join build their
    hash table of the whole set again at every call: a task that streamed a 1M-document segment in batches against
    its requests spent time quadratic in the segment (the 16M bench's fetch: 268 CPU s vs 2.6 at 1M)."""

    def __init__(self, values: pa.Array | pa.ChunkedArray) -> None:
        values = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        hashes = string_hashes(values)
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.values = hashes[order], values.take(pa.array(order))

    def __len__(self) -> int:
        return len(self.values)

    def find(self, k: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
        """(rows of `k`, positions in `self.values`) of every string of `k` in the set, rows ascending."""
        k = k.cast(self.values.type)
        hashes = string_hashes(k)
        lo = np.searchsorted(self.hashes, hashes, "left")
        counts = np.searchsorted(self.hashes, hashes, "right") - lo
        rows, pos = ranges(lo, counts)
        same = pc.equal(pc.take(k, pa.array(rows)), self.values.take(pa.array(pos)))
        keep = same.fill_null(False).to_numpy(zero_copy_only=False)
        return rows[keep], pos[keep]


FLUSH_BYTES = 64 << 20  # rows a PartWriter holds before it writes them: fewer, larger row groups per partition


class PartWriter:
    """Rows to one scratch file (replaced if it exists), grouped by destination partition: rows are held until
    `flush_bytes` of them are waiting, then written as one row group per partition present, with the partition
    in column `_part` (so a reader finds a partition's row groups by their statistics, and a task can stream
    any number of batches). Writing each small batch at once gave a scatter file ~100 batches x ~100 partitions
    of tiny row groups, and every reader walked all of them: the candidates stage was 449 of 697 CPU s at 8M
    documents. Each batch is sorted by partition as it comes and held as one slice per partition, so a flush
    copies one partition's rows at a time (sorting all held rows at the flush made 3-4 copies of them: the fetch
    task's Arrow memory peaked at 340 MiB for 64 MiB held)."""

    def __init__(self, io: FileIO, path: str, schema: pa.Schema, flush_bytes: int = FLUSH_BYTES) -> None:
        self.io, self.path, self.flush_bytes = io, path, flush_bytes
        self.rows_schema = schema
        self.schema = schema.append(pa.field(PART, pa.int64()))
        self.stream = io.new_output(path).create(overwrite=True)
        self.writer = pq.ParquetWriter(self.stream, self.schema)
        self.rows = 0
        self.held: dict[int, list[pa.Table]] = {}
        self.held_bytes = 0

    def write(self, table: pa.Table, parts: np.ndarray) -> None:
        if not table.num_rows:
            return
        order = np.argsort(parts, kind="stable")
        table, parts = table.cast(self.rows_schema).take(pa.array(order)), parts[order]
        starts = np.flatnonzero(np.r_[True, parts[1:] != parts[:-1]])
        for start, end in zip(starts.tolist(), np.r_[starts[1:], len(parts)].tolist()):
            self.held.setdefault(int(parts[start]), []).append(table.slice(start, end - start))
        self.held_bytes += table.nbytes
        self.rows += table.num_rows
        if self.held_bytes >= self.flush_bytes:
            self.flush()

    def flush(self) -> None:
        """Write the held rows, one row group per partition, in partition order."""
        held, self.held, self.held_bytes = self.held, {}, 0
        for part in sorted(held):
            table = pa.concat_tables(held.pop(part))
            table = table.append_column(PART, pa.array(np.full(table.num_rows, part, np.int64)))
            self.writer.write_table(table.cast(self.schema), row_group_size=table.num_rows)

    def close(self) -> str:
        self.flush()
        if not self.rows:
            self.writer.write_table(self.schema.empty_table())
        self.writer.close()
        self.stream.close()
        return self.path


def write_parts(io: FileIO, path: str, table: pa.Table, parts: np.ndarray) -> str:
    """Write `table` to the file `path` (replacing it), its rows grouped by `parts`; returns the path."""
    writer = PartWriter(io, path, table.schema)
    writer.write(table, parts)
    return writer.close()


def read_part(io: FileIO, paths: Sequence[str], part: int, schema: pa.Schema) -> pa.Table:
    """The rows of partition `part` from every file of `paths` (in path order), as `schema`: only the row groups
    whose `_part` statistics say `part` are read."""
    tables = list(iter_part(io, paths, part, schema))
    return pa.concat_tables(tables) if tables else schema.empty_table()


def iter_part(io: FileIO, paths: Sequence[str], part: int, schema: pa.Schema) -> Iterator[pa.Table]:
    """`read_part`'s rows a row group at a time (a `PartWriter` flush of one partition: at most FLUSH_BYTES)."""
    for path in paths:
        with io.new_input(path).open(seekable=True) as f:
            pf = pq.ParquetFile(f)
            column = pf.schema_arrow.get_field_index(PART)
            for i in range(pf.metadata.num_row_groups):
                meta = pf.metadata.row_group(i)
                if meta.num_rows and meta.column(column).statistics.min == part:
                    yield pf.read_row_group(i, columns=schema.names).cast(schema)


def delete_all(io: FileIO, paths: Sequence[str]) -> None:
    """Remove scratch files (after the commit; a missing one is fine)."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
