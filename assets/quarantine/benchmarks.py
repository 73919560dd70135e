"""Evaluation benchmarks as plain items: read benchmark files into `EvalItem(benchmark, split, item_id, text)`.
What each benchmark's text is made of, and its item ids: README.md. No Dagster here.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

BENCHMARKS_DIR = Path(__file__).resolve().parents[2] / "data" / "benchmarks"

Format = Literal["jsonl", "jsonl.gz", "csv", "parquet", "mmlu-redux-tar"]
FORMATS: tuple[str, ...] = ("jsonl", "jsonl.gz", "csv", "parquet", "mmlu-redux-tar")


@dataclass(frozen=True)
class EvalItem:
    """One evaluation item: which benchmark and split it comes from, a stable id, and its matchable text."""

    benchmark: str
    split: str
    item_id: str
    text: str


@dataclass(frozen=True)
class BenchmarkSource:
    """Where a benchmark lives and how to turn one of its rows into `EvalItem.text`.

    `fields` are joined with "\\n" (a list value, such as MMLU choices, is joined one element a line);
    `builder(row) -> str` replaces that when given. `id_field` names the row's own id (else the row number)."""

    name: str
    path: Path | str
    format: Format
    split: str = "test"
    fields: tuple[str, ...] = ()
    builder: Callable[[Mapping[str, Any]], str] | None = None
    id_field: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"BenchmarkSource {self.name!r}: format {self.format!r} is not one of {FORMATS}")
        if self.format != "mmlu-redux-tar" and not self.fields and self.builder is None:
            raise ValueError(
                f"BenchmarkSource {self.name!r}: give `fields` (names joined into the text) or a `builder`"
            )


# --- per-benchmark text builders ----------------------------------------------------------------------------


def _join(parts: Iterable[Any]) -> str:
    out = []
    for part in parts:
        if part is None:
            continue
        if isinstance(part, list | tuple):
            out.extend(str(p) for p in part)
        else:
            out.append(str(part))
    return "\n".join(p for p in out if p)


def gsm8k_text(row: Mapping[str, Any]) -> str:
    """GSM8K item text: question, then the worked answer."""
    return _join([row["question"], row["answer"]])


def humaneval_text(row: Mapping[str, Any]) -> str:
    """HumanEval item text: prompt (signature + docstring) followed by the canonical solution, as one program."""
    return row["prompt"] + row["canonical_solution"]


def parse_choices(value: Any) -> list[str]:
    """MMLU choices as a list of strings: MMLU-Redux stores them as a Python list literal ("['a', 'b']")."""
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy array from Parquet
        return [str(v) for v in value.tolist()]
    try:
        parsed = ast.literal_eval(value)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"MMLU choices are not a Python list literal: {value!r:.200}") from exc
    if not isinstance(parsed, list | tuple):
        raise ValueError(f"MMLU choices are not a list: {value!r:.200}")
    return [str(v) for v in parsed]


def mmlu_text(row: Mapping[str, Any]) -> str:
    """MMLU item text: question, then each choice on its own line."""
    return _join([row["question"].strip(), parse_choices(row["choices"])])


GSM8K = BenchmarkSource(
    "gsm8k", BENCHMARKS_DIR / "gsm8k_test.jsonl", "jsonl", "test", fields=("question", "answer"), builder=gsm8k_text
)
HUMANEVAL = BenchmarkSource(
    "humaneval",
    BENCHMARKS_DIR / "HumanEval.jsonl.gz",
    "jsonl.gz",
    "test",
    fields=("prompt", "canonical_solution"),
    builder=humaneval_text,
    id_field="task_id",
)
MMLU_REDUX = BenchmarkSource("mmlu_redux", BENCHMARKS_DIR / "mmlu-redux_4563cfa7.tar.xz", "mmlu-redux-tar", "test")

DEFAULT_SOURCES: tuple[BenchmarkSource, ...] = (GSM8K, HUMANEVAL, MMLU_REDUX)


# --- readers ------------------------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
    # One MMLU-Redux file (moral_scenarios) holds a single Mac Roman byte (0xD5, a right quote) in otherwise
    # UTF-8 text; U+FFFD in its place keeps the item, and the words on either side still split there.
    # (global_facts carries U+FFFD in its UTF-8 upstream already.)
    return data.decode("utf-8", errors="replace")


def _jsonl_rows(data: bytes, where: str) -> Iterator[dict]:
    for line_no, line in enumerate(_decode(data).splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: line {line_no} is not JSON ({exc}); is the file JSON lines?") from exc


def _csv_rows(text: str) -> list[dict]:
    # Nine MMLU-Redux files are ';'-separated; the header line tells which.
    header = text.split("\n", 1)[0]
    delimiter = ";" if header.count(";") > header.count(",") else ","
    return list(csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter))


def _parquet_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq  # only Parquet sources need it

    return pq.read_table(path).to_pylist()


def _rows(source: BenchmarkSource) -> Iterator[dict]:
    path = Path(source.path)
    if not path.exists():
        raise FileNotFoundError(f"benchmark {source.name!r}: {path} does not exist; check BenchmarkSource.path")
    if source.format == "jsonl":
        yield from _jsonl_rows(path.read_bytes(), str(path))
    elif source.format == "jsonl.gz":
        yield from _jsonl_rows(gzip.decompress(path.read_bytes()), str(path))
    elif source.format == "csv":
        yield from _csv_rows(_decode(path.read_bytes()))
    elif source.format == "parquet":
        yield from _parquet_rows(path)
    else:
        raise ValueError(f"benchmark {source.name!r}: format {source.format!r} has no row reader")


def _item_text(source: BenchmarkSource, row: Mapping[str, Any], where: str) -> str:
    try:
        if source.builder is not None:
            return source.builder(row)
        return _join(row[f] for f in source.fields)
    except KeyError as exc:
        raise ValueError(
            f"{where}: row has no field {exc.args[0]!r} (fields: {sorted(row)}); fix BenchmarkSource.fields"
        ) from exc


_MMLU_MEMBER = re.compile(r"(?:^|/)mmlu_([a-z0-9_]+)\.csv$")


def _mmlu_redux_items(source: BenchmarkSource) -> Iterator[EvalItem]:
    with tarfile.open(source.path, "r:*") as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.isfile() and _MMLU_MEMBER.search(m.name)), key=lambda m: m.name
        )
        if not members:
            raise ValueError(f"{source.path}: no mmlu_<subject>.csv members; is this the MMLU-Redux archive?")
        for member in members:
            subject = _MMLU_MEMBER.search(member.name).group(1)
            rows = _csv_rows(_decode(tar.extractfile(member).read()))
            for row_no, row in enumerate(rows):
                where = f"{source.path}:{member.name} row {row_no}"
                text = source.builder(row) if source.builder else _item_text_mmlu(row, where)
                yield EvalItem(source.name, source.split, f"{source.name}/{subject}/{row_no}", text)


def _item_text_mmlu(row: Mapping[str, Any], where: str) -> str:
    try:
        return mmlu_text(row)
    except (KeyError, ValueError) as exc:
        raise ValueError(f"{where}: cannot build the MMLU text: {exc}") from exc


def read_benchmark(source: BenchmarkSource) -> list[EvalItem]:
    """All items of one benchmark source, in file order (MMLU-Redux: subjects in name order, rows in file order)."""
    if source.format == "mmlu-redux-tar":
        return list(_mmlu_redux_items(source))
    items = []
    for row_no, row in enumerate(_rows(source)):
        key = row_no if source.id_field is None else row[source.id_field]
        where = f"{source.path} row {row_no}"
        text = _item_text(source, row, where)
        items.append(EvalItem(source.name, source.split, f"{source.name}/{source.split}/{key}", text))
    return items


def load_items(sources: Iterable[BenchmarkSource] = DEFAULT_SOURCES) -> list[EvalItem]:
    """Items of every source, in source order; refuses duplicate item ids (they key the quarantine tables)."""
    items: list[EvalItem] = []
    seen: set[str] = set()
    for source in sources:
        for item in read_benchmark(source):
            if item.item_id in seen:
                raise ValueError(f"duplicate eval item id {item.item_id!r}; give source {source.name!r} an id_field")
            seen.add(item.item_id)
            items.append(item)
    return items


def find_source(name: str, configured: Iterable[BenchmarkSource] = ()) -> BenchmarkSource:
    """The benchmark source of that name: a configured one, else a shipped one (`DEFAULT_SOURCES`)."""
    sources = {s.name: s for s in DEFAULT_SOURCES} | {s.name: s for s in configured}
    if name not in sources:
        raise KeyError(
            f"unknown benchmark {name!r}: shipped {sorted(s.name for s in DEFAULT_SOURCES)}; add others "
            f"under the `benchmarks` resource's `extra`"
        )
    return sources[name]
