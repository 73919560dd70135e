"""Benchmark readers on the shipped real benchmark files (data/benchmarks/) and on generic sources."""

from __future__ import annotations

import gzip
import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from assets.quarantine.benchmarks import (
    DEFAULT_SOURCES,
    GSM8K,
    HUMANEVAL,
    BenchmarkSource,
    EvalItem,
    load_items,
    mmlu_text,
    parse_choices,
    read_benchmark,
)


@pytest.fixture(scope="module")
def items() -> list[EvalItem]:
    return load_items()


def test_default_sources_give_all_items_with_unique_ids(items):
    counts = {}
    for item in items:
        counts[item.benchmark] = counts.get(item.benchmark, 0) + 1
    assert counts == {"gsm8k": 1319, "humaneval": 164, "mmlu_redux": 5700}
    assert len({i.item_id for i in items}) == len(items) == 7183
    assert all(i.split == "test" and i.text.strip() for i in items)


def test_item_ids_follow_the_documented_patterns(items):
    ids = [i.item_id for i in items]
    assert ids[0] == "gsm8k/test/0" and ids[1318] == "gsm8k/test/1318"
    assert ids[1319] == "humaneval/test/HumanEval/0" and ids[1319 + 163] == "humaneval/test/HumanEval/163"
    assert ids[1319 + 164] == "mmlu_redux/abstract_algebra/0" and ids[-1] == "mmlu_redux/world_religions/99"
    subjects = {i.item_id.split("/")[1] for i in items if i.benchmark == "mmlu_redux"}
    assert len(subjects) == 57
    assert all(re.fullmatch(r"mmlu_redux/[a-z_]+/\d{1,2}", i.item_id) for i in items if i.benchmark == "mmlu_redux")


def test_loading_is_deterministic(items):
    assert load_items() == items


def test_gsm8k_text_is_question_then_answer():
    first = json.loads(GSM8K.path.read_text(encoding="utf-8").splitlines()[0])
    item = read_benchmark(GSM8K)[0]
    assert item.text == first["question"] + "\n" + first["answer"]
    assert item.text.startswith("Janet\u2019s ducks lay 16 eggs per day.") and item.text.endswith("#### 18")


def test_humaneval_text_is_prompt_and_solution_without_tests():
    rows = [json.loads(line) for line in gzip.open(HUMANEVAL.path, "rt", encoding="utf-8")]
    items = read_benchmark(HUMANEVAL)
    assert [i.text for i in items] == [r["prompt"] + r["canonical_solution"] for r in rows]
    assert not any("def check(candidate)" in i.text for i in items)
    assert items[0].item_id == "humaneval/test/HumanEval/0" and "def has_close_elements" in items[0].text


def test_mmlu_redux_comma_and_semicolon_files_both_parse(items):
    by_id = {i.item_id: i for i in items}
    # mmlu_anatomy.csv is one of the nine ';'-separated files of the archive.
    assert by_id["mmlu_redux/anatomy/0"].text == (
        "Which of the following is a disorder characterized by uncontrollable episodes of falling asleep during "
        "the day?\nDyslexia\nEpilepsy\nHydrocephalus\nNarcolepsy"
    )
    assert by_id["mmlu_redux/abstract_algebra/13"].text == (
        "How many homomorphisms are there of Z into Z_2?\n1\n2\ninfinitely many\n0"
    )
    # Every MMLU item is its question plus at least two choice lines, and no list syntax leaked through.
    mmlu = [i for i in items if i.benchmark == "mmlu_redux"]
    assert all(len(i.text.split("\n")) >= 3 for i in mmlu)
    list_syntax = [i.item_id for i in mmlu if i.text.split("\n")[1].startswith("['")]
    assert list_syntax == ["mmlu_redux/high_school_computer_science/58"]  # its first choice IS "['Hi!', ...]"


def test_mmlu_redux_stray_mac_roman_byte_is_replaced_not_fatal(items):
    # mmlu_moral_scenarios.csv holds one byte 0xD5 (a Mac Roman right quote) in UTF-8 text; global_facts
    # already carries U+FFFD in its UTF-8 upstream (lost quotes), four times.
    hits = [i.item_id for i in items if "\ufffd" in i.text]
    assert hits == [f"mmlu_redux/global_facts/{k}" for k in (18, 48, 54, 62)] + ["mmlu_redux/moral_scenarios/52"]
    assert "I slapped my sister\ufffds head." in next(i.text for i in items if i.item_id == hits[-1])


def test_parse_choices_and_mmlu_text():
    assert parse_choices("['True, True', 'False, False']") == ["True, True", "False, False"]
    assert parse_choices(["a", 2]) == ["a", "2"]
    assert mmlu_text({"question": " Q? \n", "choices": "['x', 'y']"}) == "Q?\nx\ny"
    with pytest.raises(ValueError, match="not a Python list literal"):
        parse_choices("[unclosed")


def test_generic_jsonl_csv_parquet_and_gz_sources(tmp_path):
    rows = [
        {"id": "a1", "q": "What is two plus two?", "a": "four"},
        {"id": "b2", "q": "Capital of France?", "a": "Paris"},
    ]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with gzip.open(tmp_path / "t.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "t.csv").write_text("id,q,a\na1,What is two plus two?,four\nb2,Capital of France?,Paris\n")
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")

    expected = ["What is two plus two?\nfour", "Capital of France?\nParis"]
    for fmt, name in (("jsonl", "t.jsonl"), ("jsonl.gz", "t.jsonl.gz"), ("csv", "t.csv"), ("parquet", "t.parquet")):
        source = BenchmarkSource("mine", tmp_path / name, fmt, "dev", fields=("q", "a"), id_field="id")
        got = read_benchmark(source)
        assert [i.text for i in got] == expected, fmt
        assert [i.item_id for i in got] == ["mine/dev/a1", "mine/dev/b2"], fmt
        assert {i.split for i in got} == {"dev"}

    by_builder = BenchmarkSource("b", tmp_path / "t.jsonl", "jsonl", builder=lambda r: r["q"].upper())
    assert [i.item_id for i in read_benchmark(by_builder)] == ["b/test/0", "b/test/1"]
    assert read_benchmark(by_builder)[1].text == "CAPITAL OF FRANCE?"


def test_bad_sources_fail_with_the_offending_value(tmp_path):
    (tmp_path / "t.jsonl").write_text('{"q": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="format 'xml'"):
        BenchmarkSource("x", tmp_path / "t.jsonl", "xml", fields=("q",))
    with pytest.raises(ValueError, match="give `fields`"):
        BenchmarkSource("x", tmp_path / "t.jsonl", "jsonl")
    with pytest.raises(ValueError, match="no field 'answer'"):
        read_benchmark(BenchmarkSource("x", tmp_path / "t.jsonl", "jsonl", fields=("q", "answer")))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_benchmark(BenchmarkSource("x", tmp_path / "missing.jsonl", "jsonl", fields=("q",)))
    dup = BenchmarkSource("x", tmp_path / "t.jsonl", "jsonl", fields=("q",))
    with pytest.raises(ValueError, match="duplicate eval item id 'x/test/0'"):
        load_items([dup, dup])


def test_default_sources_point_into_the_repo():
    for source in DEFAULT_SOURCES:
        assert source.path.exists() and "data/benchmarks" in source.path.as_posix()
