"""Raw evidence as plan -> task -> commit: one task per WARC file (or a few), one commit per table. No Dagster.

`plan` lists the segment's WARC files in name order and gives each task its output locations; `run_task`
streams its files through `read_warc` into Parquet data files of `raw.warc_records` and
`raw.rejected_records` (memory bounded by one batch plus one record) and returns their paths and the
per-file stats; `commit` replaces exactly the segment's partition of both tables, each in one transaction,
with the files of every task in plan order, so the tables do not depend on which task ran first.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO
from urllib.parse import unquote, urlparse

import pyarrow as pa

from assets.knobs import knob
from assets.raw.warc_reader import DEFAULT_MAX_RECORD_BYTES, FileStats, ReadContext, read_warc
from iceberg_catalog import CommitResult, FileWriter, Lakehouse, Provenance, TableDef, TaskOutput, TaskResult
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS

TABLES = (RAW_WARC_RECORDS, RAW_REJECTED_RECORDS)


@dataclass(frozen=True)
class IngestParams:
    """Knobs of the raw ingest; only `max_record_bytes` changes what is stored."""

    max_record_bytes: int = knob(
        DEFAULT_MAX_RECORD_BYTES, "a record whose payload is larger is rejected (record_too_large) instead of stored"
    )
    batch_bytes: int = knob(8 << 20, "payload bytes buffered before rows are written (bounds memory)")
    batch_rows: int = knob(10_000, "rows buffered before they are written (bounds memory)")
    files_per_task: int = knob(1, "WARC files per task: the unit an executor runs (results do not depend on it)")

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash)."""
        return {"max_record_bytes": self.max_record_bytes}


@dataclass(frozen=True)
class IngestTask:
    """Read `files` (URIs, in order) of one segment into the two outputs."""

    index: int
    files: tuple[str, ...]
    context: ReadContext
    params: IngestParams
    rows_out: TaskOutput
    rejects_out: TaskOutput
    s3_endpoint: str | None = None  # for s3:// files (None: the AWS chain's); credentials: the node's own


@dataclass(frozen=True)
class SegmentSource:
    """One segment's input: its WARC file URIs in ingest (name) order, its licence basis, the ingest time, the
    S3 endpoint of `s3://` files (never a credential: tasks take those from their own environment)."""

    crawl: str
    segment: str
    files: tuple[str, ...]
    licence_basis: str
    ingested_at: datetime
    s3_endpoint: str | None = None

    @property
    def partition(self) -> dict[str, str]:
        return {"crawl": self.crawl, "segment": self.segment}


def plan(lakehouse: Lakehouse, source: SegmentSource, params: IngestParams, run: str) -> list[IngestTask]:
    """One task per `params.files_per_task` files of the segment, in the order given."""
    if params.files_per_task < 1:
        raise ValueError(f"files_per_task must be >= 1, got {params.files_per_task}")
    ctx = ReadContext(source.crawl, source.segment, source.licence_basis, source.ingested_at)
    step = params.files_per_task
    return [
        IngestTask(
            i,
            source.files[start : start + step],
            ctx,
            params,
            lakehouse.output(RAW_WARC_RECORDS, source.partition, run, i),
            lakehouse.output(RAW_REJECTED_RECORDS, source.partition, run, i),
            source.s3_endpoint,
        )
        for i, start in enumerate(range(0, len(source.files), step))
    ]


def open_uri(uri: str, s3_endpoint: str | None = None) -> BinaryIO:
    """A WARC file by URI, streamed (never staged whole): `file://` (or a plain path) here, `s3://` through
    `S3Stream` (ranged reads resumed with bounded retries, timeouts; at `s3_endpoint`, else the AWS chain's
    `AWS_ENDPOINT_URL`; credentials from the AWS chain), other schemes through pyarrow's filesystems."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return open(unquote(parsed.path) if parsed.scheme else uri, "rb")
    if parsed.scheme in ("s3", "s3a"):
        stream = S3Stream(parsed.netloc, unquote(parsed.path.lstrip("/")), client=s3_client(s3_endpoint))
        return io.BufferedReader(stream, buffer_size=1 << 20)
    from pyarrow import fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem.open_input_stream(path)


S3_TIMEOUT_S = 30.0  # connect and read timeout per request
S3_ATTEMPTS = 5  # reads of one object resumed at most this many times (backoff 0.5 s, 1 s, 2 s, ...)


class S3Stream(io.RawIOBase):
    """Sequential reads of one S3 object: one GET from the current offset, re-issued as a ranged GET
    (`Range: bytes=<pos>-`) after a dropped connection or a timeout, at most `attempts` times per failure run."""

    def __init__(self, bucket: str, key: str, attempts: int = S3_ATTEMPTS, client=None, backoff_s: float = 0.5):
        self.bucket, self.key, self.attempts, self.backoff_s = bucket, key, attempts, backoff_s
        self.pos, self._body = 0, None
        self._client = client or s3_client()

    def readable(self) -> bool:
        return True

    def _open(self):
        args = {"Bucket": self.bucket, "Key": self.key}
        if self.pos:
            args["Range"] = f"bytes={self.pos}-"
        return self._client.get_object(**args)["Body"]

    def readinto(self, buf) -> int:
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(self.attempts):
            try:
                if self._body is None:
                    self._body = self._open()
                data = self._body.read(len(buf))
                buf[: len(data)] = data
                self.pos += len(data)
                return len(data)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "InvalidRange":  # resumed exactly at the end
                    return 0
                if exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 500) < 500:
                    raise  # missing object, refused credentials: no retry helps
                err = exc
            except (BotoCoreError, OSError) as exc:
                err = exc
            self._close_body()
            time.sleep(min(self.backoff_s * 2**attempt, 8.0))
        raise OSError(f"s3://{self.bucket}/{self.key}: read at byte {self.pos} failed {self.attempts} times: {err}")

    def _close_body(self) -> None:
        if self._body is not None:
            with contextlib.suppress(Exception):
                self._body.close()
            self._body = None

    def close(self) -> None:
        self._close_body()
        super().close()


def s3_client(endpoint_url: str | None = None):
    """A boto3 S3 client with timeouts, credentials from the AWS chain, at `endpoint_url` (None: the chain's);
    path-style when an endpoint is configured (MinIO, SeaweedFS), the AWS default otherwise."""
    import boto3
    from botocore.config import Config

    custom = bool(endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"))
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint_url or None,
        config=Config(
            connect_timeout=S3_TIMEOUT_S,
            read_timeout=S3_TIMEOUT_S,
            retries={"max_attempts": S3_ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path" if custom else "auto"},
        ),
    )


class _Buffer:
    """Rows of one table collected until `max_bytes`/`max_rows`, then written as one Arrow table."""

    def __init__(self, writer: FileWriter, schema: pa.Schema, max_bytes: int, max_rows: int) -> None:
        self.writer, self.schema, self.max_bytes, self.max_rows = writer, schema, max_bytes, max_rows
        self.rows: list[dict] = []
        self.nbytes = 0

    def add(self, row: dict, nbytes: int) -> None:
        self.rows.append(row)
        self.nbytes += nbytes
        if self.nbytes >= self.max_bytes or len(self.rows) >= self.max_rows:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.writer.write(pa.Table.from_pylist(self.rows, schema=self.schema))
        self.rows, self.nbytes = [], 0


def run_task(task: IngestTask) -> TaskResult:
    """Stream the task's files into data files; stats per file (`FileStats` as a dict). Never commits."""
    p = task.params
    rows_writer, rejects_writer = FileWriter(task.rows_out), FileWriter(task.rejects_out)
    rows = _Buffer(rows_writer, RAW_WARC_RECORDS.arrow_schema, p.batch_bytes, p.batch_rows)
    rejects = _Buffer(rejects_writer, RAW_REJECTED_RECORDS.arrow_schema, p.batch_bytes, p.batch_rows)
    per_file = []
    for uri in task.files:
        fs = FileStats(uri)
        with open_uri(uri, task.s3_endpoint) as fh:
            for kind, item in read_warc(fh, uri, task.context, fs, max_record_bytes=p.max_record_bytes):
                if kind == "row":
                    rows.add(item, item["payload_length"] + 512)
                else:
                    rejects.add(item, 512)
        per_file.append(fs.as_dict())
    rows.flush()
    rejects.flush()
    return TaskResult(task.index, (rows_writer.close(), rejects_writer.close()), {"files": per_file})


def commit(
    lakehouse: Lakehouse,
    source: SegmentSource,
    results: Sequence[TaskResult],
    provenance: Mapping[TableDef, Provenance],
) -> dict[TableDef, CommitResult]:
    """Replace the segment's partition of both raw tables with the tasks' files (one transaction each)."""
    return lakehouse.commit(results, {t: source.partition for t in TABLES}, provenance)


@dataclass
class SegmentStats:
    """Totals over a segment's files, plus each file's own stats, in plan order."""

    files: list[FileStats] = field(default_factory=list)

    @classmethod
    def of(cls, results: Sequence[TaskResult]) -> SegmentStats:
        files = []
        for r in sorted(results, key=lambda r: r.task_index):
            for f in r.stats["files"]:
                files.append(FileStats(f["warc_file"], f["bytes_read"], Counter(f["records"]), Counter(f["rejects"])))
        return cls(files)

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
