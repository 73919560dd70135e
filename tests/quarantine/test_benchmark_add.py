"""`tokenlake benchmark add|list`: a benchmark from a file becomes a partition whose data lives in the lakehouse
under its sha256, every curated segment is screened against it, and a bad file is refused naming file and line.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.quarantine.registry import BenchmarkFileError, check_file, check_name

REPO = Path(__file__).resolve().parents[2]
SEGMENT = "LEGACY-ARCHIVES/wget-2024"


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("name", "content", "fmt", "fields", "message"),
    [
        ("missing_field.jsonl", '{"q": "a"}\n{"q": "b", "a": "c"}\n{"a": "x"}\n', "jsonl", ["q"], r":3: no field 'q'"),
        ("not_json.jsonl", "q,a\nwhat,this\n", "jsonl", ["q"], r":1: not JSON .*--format jsonl"),
        ("empty.jsonl", "\n\n", "jsonl", ["q"], r"the file is empty"),
        ("blank_text.jsonl", '{"q": "fine"}\n{"q": "  "}\n', "jsonl", ["q"], r":2: the text fields .* are all empty"),
        ("no_column.csv", "question,answer\nwhat,that\n", "csv", ["q"], r":1: the header has no column 'q'"),
        ("short_row.csv", "q,a\none,two\nthree\n", "csv", ["q", "a"], r":3: 2 columns in the header"),
        ("header_only.csv", "q,a\n", "csv", ["q"], r"no items"),
        ("not_parquet.parquet", '{"q": "a"}\n', "parquet", ["q"], r"not a Parquet file"),
        ("binary.jsonl", '{"q": "a"}\n\xff\xfe\n', "jsonl", ["q"], r":2: not UTF-8"),
    ],
)
def test_bad_files_are_refused_naming_file_and_line(tmp_path, name, content, fmt, fields, message):
    path = tmp_path / name
    if "\xff" in content:
        path.write_bytes(content.encode("latin-1"))
    else:
        path.write_text(content)
    with pytest.raises(BenchmarkFileError, match=message) as err:
        check_file(path, fmt, fields)
    assert str(path) in str(err.value)


def test_good_files_of_each_format_count_their_items(tmp_path):
    rows = [{"q": f"question {i}", "a": f"answer {i}"} for i in range(5)]
    assert check_file(_jsonl(tmp_path / "b.jsonl", rows), "jsonl", ["q", "a"]) == 5
    (tmp_path / "b.csv").write_text("q,a\n" + "".join(f'"question, {i}","answer\n{i}"\n' for i in range(5)))
    assert check_file(tmp_path / "b.csv", "csv", ["q", "a"]) == 5
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "b.parquet")
    assert check_file(tmp_path / "b.parquet", "parquet", ["q"]) == 5
    with pytest.raises(BenchmarkFileError, match=r"b.parquet: row 2: the text fields"):
        pq.write_table(pa.Table.from_pylist([*rows[:2], {"q": "", "a": "x"}]), tmp_path / "b.parquet")
        check_file(tmp_path / "b.parquet", "parquet", ["q"])


def test_names_are_partition_keys_and_not_shipped_benchmarks():
    check_name("my-canary_2")
    for bad in ("gsm8k", "Upper", "a/b", "", "x" * 65):
        with pytest.raises(BenchmarkFileError):
            check_name(bad)


def canary_rows(text: str) -> list[dict]:
    """A small benchmark: one item made of a 40-word passage of a real kept document, and two unrelated ones."""
    words = text.split()
    passage = " ".join(words[len(words) // 3 : len(words) // 3 + 40])
    return [
        {"question": "Which passage is this?", "answer": passage},
        {"question": "What is 17 times 23?", "answer": "17 times 23 is 391."},
        {"question": "Name the largest planet.", "answer": "Jupiter is the largest planet of the solar system."},
    ]


@pytest.mark.slow  # ingest and curate a segment, then the command's register and decontaminate runs: ~30 s
def test_benchmark_add_copies_screens_every_curated_segment_and_reports(
    tmp_path, monkeypatch, capsys, reference_lm_file
):
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import (
        CURATED_DOCUMENTS,
        QUARANTINE_BENCHMARK_SOURCES,
        QUARANTINE_EVAL_ITEMS,
        QUARANTINE_MATCHES,
    )
    from orchestration.cli import main
    from orchestration.demo import run_job
    from orchestration.instance import prepare_dagster_home

    crawl, home = tmp_path / "crawl", tmp_path / "home"
    crawl_name, segment = SEGMENT.split("/")
    shutil.copytree(
        REPO / "data/sample_crawl/crawl-data" / crawl_name / "segments" / segment,
        crawl / "crawl-data" / crawl_name / "segments" / segment,
    )
    monkeypatch.setenv("TOKENLAKE_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    monkeypatch.setenv("TOKENLAKE_CRAWL_ROOT", str(crawl))
    monkeypatch.setenv("TOKENLAKE_LM_PATH", reference_lm_file)
    prepare_dagster_home()
    from orchestration.definitions import build_defs

    defs = build_defs()
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("crawl_segments", [SEGMENT])
        run_job(defs, instance, "raw_ingest", SEGMENT)
        run_job(defs, instance, "curate", SEGMENT)
    lakehouse = Lakehouse()
    kept = [r for r in lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "text", "kept")).to_pylist() if r["kept"]]
    target = max(kept, key=lambda r: len(r["text"]))
    source = _jsonl(tmp_path / "canary.jsonl", canary_rows(target["text"]))

    capsys.readouterr()
    bad = _jsonl(tmp_path / "bad.jsonl", [{"question": "q"}, {"answer": "no question here"}])
    assert main(["benchmark", "add", "bad", str(bad), "--format", "jsonl", "--text-fields", "question"]) == 2
    assert f"{bad}:2: no field 'question'" in capsys.readouterr().err

    argv = ["benchmark", "add", "canary", str(source), "--format", "jsonl", "--text-fields", "question,answer"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    print(out)
    assert re.search(r"canary: 1 segments screened, \d+ kept documents checked, 1 contaminated", out), out
    assert target["doc_id"][:16] in out

    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    [stored] = lakehouse.scan(QUARANTINE_BENCHMARK_SOURCES, ("name", "sha256", "data")).to_pylist()
    assert stored == {"name": "canary", "sha256": sha, "data": source.read_bytes()}
    source.write_text("")  # the lakehouse holds its own copy: the original may go
    items = lakehouse.scan(QUARANTINE_EVAL_ITEMS, ("benchmark", "item_id")).to_pylist()
    assert sorted(r["item_id"] for r in items if r["benchmark"] == "canary") == [f"canary/test/{i}" for i in range(3)]
    found = {
        (r["doc_id"], r["item_id"])
        for r in lakehouse.scan(QUARANTINE_MATCHES, ("benchmark", "doc_id", "item_id")).to_pylist()
        if r["benchmark"] == "canary"
    }
    assert found == {(target["doc_id"], "canary/test/0")}

    assert main(["benchmark", "list"]) == 0
    listing = capsys.readouterr().out
    line = next(x for x in listing.splitlines() if x.startswith("canary "))
    assert re.match(r"canary\s+3\s+1\s+1\s+added: jsonl question,answer sha256 " + sha[:12], line), line
    assert re.search(r"^gsm8k\s+0\s+0\s+0\s+shipped", listing, re.M), listing
