"""Ingest the WARC files of one segment into two streaming writers (rows, rejects). No Dagster here."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

import pyarrow as pa

from assets.raw.warc_reader import DEFAULT_MAX_RECORD_BYTES, FileStats, ReadContext, read_warc
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS


class BatchSink(Protocol):
    def write(self, data: pa.Table) -> None: ...


@dataclass
class SegmentStats:
    """Totals over a segment's files, plus each file's own stats."""

    files: list[FileStats] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rows(self) -> int:
        return sum(f.responses for f in self.files)

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self.files)

    @property
    def records(self) -> Counter:
        return sum((f.records for f in self.files), Counter())

    @property
    def rejects(self) -> Counter:
        return sum((f.rejects for f in self.files), Counter())


class _Buffer:
    """Rows of one table collected until `max_bytes`/`max_rows`, then flushed to the sink as Arrow."""

    def __init__(self, sink: BatchSink, schema: pa.Schema, max_bytes: int, max_rows: int) -> None:
        self.sink, self.schema, self.max_bytes, self.max_rows = sink, schema, max_bytes, max_rows
        self.rows: list[dict] = []
        self.nbytes = 0

    def add(self, row: dict, nbytes: int) -> None:
        self.rows.append(row)
        self.nbytes += nbytes
        if self.nbytes >= self.max_bytes or len(self.rows) >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.sink.write(pa.Table.from_pylist(self.rows, schema=self.schema))
        self.rows, self.nbytes = [], 0


def ingest_segment(
    files: Iterable[str],
    open_file: Callable[[str], BinaryIO],
    ctx: ReadContext,
    rows_sink: BatchSink,
    rejects_sink: BatchSink,
    *,
    batch_bytes: int = 8 << 20,
    batch_rows: int = 10_000,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    log: logging.Logger | None = None,
) -> SegmentStats:
    """Stream every file into the sinks in order; memory is bounded by one batch plus one record."""
    stats = SegmentStats()
    rows = _Buffer(rows_sink, RAW_WARC_RECORDS.arrow_schema, batch_bytes, batch_rows)
    rejects = _Buffer(rejects_sink, RAW_REJECTED_RECORDS.arrow_schema, batch_bytes, batch_rows)
    t0 = time.perf_counter()
    for uri in files:
        fs = FileStats(uri)
        with open_file(uri) as fh:
            for kind, item in read_warc(fh, uri, ctx, fs, max_record_bytes=max_record_bytes):
                if kind == "row":
                    rows.add(item, item["payload_length"] + 512)
                else:
                    rejects.add(item, 512)
        stats.files.append(fs)
        if log is not None:
            others = {k: v for k, v in sorted(fs.records.items()) if k not in ("response", "rejected")}
            log.info("%s: %d responses stored, rejects %s, other records %s, %.2f MB read", uri.rsplit("/", 1)[-1],
                     fs.responses, dict(fs.rejects), others, fs.bytes_read / 1e6)
    rows.flush()
    rejects.flush()
    stats.seconds = time.perf_counter() - t0
    return stats
