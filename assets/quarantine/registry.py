"""Benchmarks added by a user (`tokenlake benchmark add`): a JSONL, CSV or Parquet file is checked row by row
and stored in the lakehouse with its content hash, so the `quarantine/eval_items` asset finds it by name on
any machine that reads the catalog. No Dagster here.

Stored as one row of `quarantine.benchmark_sources` per name (the file's bytes, sha256, format, split, text
fields, items, where it came from): a table, so adding is one Iceberg commit and it works on every catalog and
object store. Re-adding a name with other content replaces its partition; the old content stays in the
table's history until snapshots expire.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import re
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
from pyiceberg.expressions import EqualTo

from assets.quarantine.benchmarks import DEFAULT_SOURCES, BenchmarkSource, read_benchmark
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.schemas import QUARANTINE_BENCHMARK_SOURCES

USER_FORMATS = ("jsonl", "csv", "parquet")
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


class BenchmarkFileError(ValueError):
    """A benchmark file that cannot become items; the message names the file and, where there is one, the line."""


@dataclass(frozen=True)
class RegisteredBenchmark:
    """One user benchmark as recorded in the lakehouse."""

    name: str
    format: str
    split: str
    text_fields: tuple[str, ...]
    sha256: str
    items: int
    path: str  # names the stored copy: quarantine.benchmark_sources/<name>/<sha256>.<format>
    original: str  # where it was added from (for the record only)
    added_at: str

    def source(self, local_path: str | Path | None = None) -> BenchmarkSource:
        """The `BenchmarkSource` that reads it (from `local_path` when the copy was fetched elsewhere)."""
        return BenchmarkSource(self.name, local_path or self.path, self.format, self.split, self.text_fields)


def check_name(name: str) -> None:
    """A benchmark name is a partition key: lower-case letters, digits, `_` and `-`; not a shipped name."""
    if not NAME.fullmatch(name):
        raise BenchmarkFileError(f"benchmark name {name!r}: use 1-64 of a-z, 0-9, '_' and '-', starting alphanumeric")
    if name in {s.name for s in DEFAULT_SOURCES}:
        raise BenchmarkFileError(f"benchmark name {name!r} is a shipped benchmark; choose another name")


def _require(row: object, fields: Sequence[str], where: str) -> None:
    if not isinstance(row, dict):
        raise BenchmarkFileError(f"{where}: expected an object with fields {list(fields)}, got {type(row).__name__}")
    missing = [f for f in fields if f not in row]
    if missing:
        raise BenchmarkFileError(f"{where}: no field {missing[0]!r} (the row has {sorted(row)}); check --text-fields")
    if not any(str(row[f]).strip() for f in fields if row[f] is not None):
        raise BenchmarkFileError(f"{where}: the text fields {list(fields)} are all empty")


def _decode(data: bytes, path: Path, encoding: str) -> str:
    """The file's text; a `BenchmarkFileError` naming the line of the first byte that is not UTF-8."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BenchmarkFileError(f"{path}:{line}: not UTF-8 text ({exc.reason}); is --format right?") from exc


def _check_jsonl(data: bytes, path: Path, fields: Sequence[str]) -> int:
    text = _decode(data, path, "utf-8")
    rows = 0
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchmarkFileError(f"{path}:{line_no}: not JSON ({exc.msg}); is --format jsonl right?") from exc
        _require(row, fields, f"{path}:{line_no}")
        rows += 1
    return rows


def _check_csv(data: bytes, path: Path, fields: Sequence[str]) -> int:
    text = _decode(data, path, "utf-8-sig")  # a spreadsheet's byte-order mark is not part of the first column's name
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    missing = [f for f in fields if f not in header]
    if header and missing:
        raise BenchmarkFileError(f"{path}:1: the header has no column {missing[0]!r} (columns: {header})")
    rows = 0
    try:
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row or None in row.values():
                raise BenchmarkFileError(f"{where}: {len(header)} columns in the header, another count in this row")
            _require(row, fields, where)
            rows += 1
    except csv.Error as exc:
        raise BenchmarkFileError(f"{path}:{reader.line_num}: not CSV ({exc})") from exc
    return rows


def _check_parquet(path: Path, fields: Sequence[str]) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BenchmarkFileError(f"{path}: not a Parquet file ({exc}); is --format right?") from exc
    missing = [f for f in fields if f not in table.column_names]
    if missing:
        raise BenchmarkFileError(f"{path}: no column {missing[0]!r} (columns: {table.column_names})")
    for row_no, row in enumerate(table.select(list(fields)).to_pylist()):
        _require(row, fields, f"{path}: row {row_no}")
    return table.num_rows


def check_file(path: Path, fmt: str, text_fields: Sequence[str]) -> int:
    """How many items the file holds; raises `BenchmarkFileError` naming the file and line of the first
    problem: missing file, unknown format, empty file, a row that is not of the format, a missing field,
    a row whose text fields are all empty."""
    if fmt not in USER_FORMATS:
        raise BenchmarkFileError(f"{path}: format {fmt!r} is not one of {', '.join(USER_FORMATS)}")
    if not text_fields or not all(f.strip() for f in text_fields):
        raise BenchmarkFileError(f"{path}: give --text-fields, the fields joined into each item's text")
    if not path.is_file():
        raise BenchmarkFileError(f"{path}: no such file")
    data = path.read_bytes()
    if not data.strip():
        raise BenchmarkFileError(f"{path}: the file is empty")
    if fmt == "jsonl":
        rows = _check_jsonl(data, path, text_fields)
    elif fmt == "csv":
        rows = _check_csv(data, path, text_fields)
    else:
        rows = _check_parquet(path, text_fields)
    if rows == 0:
        raise BenchmarkFileError(f"{path}: no items (only blank lines or a header)")
    return rows


def _row(added: RegisteredBenchmark, data: bytes) -> pa.Table:
    row = {**asdict(added), "text_fields": json.dumps(list(added.text_fields)), "data": data}
    row.pop("path")
    return pa.Table.from_pylist([row], schema=QUARANTINE_BENCHMARK_SOURCES.arrow_schema)


def register(
    lakehouse: Lakehouse, name: str, path: Path, fmt: str, text_fields: Sequence[str], split: str = "test"
) -> RegisteredBenchmark:
    """Check the file and store it, with its sha256 and how to read it, as benchmark `name` (one commit)."""
    check_name(name)
    items = check_file(path, fmt, text_fields)
    data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    location = f"{QUARANTINE_BENCHMARK_SOURCES.identifier}/{name}/{sha}.{fmt}"
    added = RegisteredBenchmark(
        name, fmt, split, tuple(text_fields), sha, items, location, str(path.resolve()), datetime.now(UTC).isoformat()
    )
    writer = lakehouse.writer(QUARANTINE_BENCHMARK_SOURCES, {"name": name})
    writer.write(_row(added, data))
    writer.commit(Provenance("quarantine/benchmark_sources", name, "benchmark-add", "1", sha))
    return added


def _stored(lakehouse: Lakehouse, name: str, columns: Sequence[str]) -> dict | None:
    rows = lakehouse.scan(QUARANTINE_BENCHMARK_SOURCES, tuple(columns), EqualTo("name", name)).to_pylist()
    return rows[0] if rows else None


def registered(lakehouse: Lakehouse, name: str) -> RegisteredBenchmark | None:
    """The registration of `name`, or None when it was never added."""
    fields = [f.name for f in dataclasses.fields(RegisteredBenchmark) if f.name != "path"]
    doc = _stored(lakehouse, name, fields)
    if doc is None:
        return None
    location = f"{QUARANTINE_BENCHMARK_SOURCES.identifier}/{name}/{doc['sha256']}.{doc['format']}"
    return RegisteredBenchmark(**{**doc, "text_fields": tuple(json.loads(doc["text_fields"])), "path": location})


@contextmanager
def local_source(lakehouse: Lakehouse, added: RegisteredBenchmark) -> Iterator[BenchmarkSource]:
    """A source reading the stored copy from a temporary file, its sha256 checked against the registration."""
    row = _stored(lakehouse, added.name, ("data",))
    data = row["data"] if row else None
    if data is None or hashlib.sha256(data).hexdigest() != added.sha256:
        raise BenchmarkFileError(f"{added.path}: missing or changed since it was added (sha256 differs)")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / f"{added.name}.{added.format}"
        local.write_bytes(data)
        yield added.source(local)


def read_registered(lakehouse: Lakehouse, added: RegisteredBenchmark):
    """The items of a registered benchmark, read from its lakehouse copy."""
    with local_source(lakehouse, added) as source:
        return read_benchmark(source)
