"""curated/* assets through Dagster on real WARC data, into a real catalog (the raw and curated states' own
Definitions; no other state is needed)."""

from __future__ import annotations

import dataclasses
import gzip
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import dagster as dg
import kenlm
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from assets.curated import curate
from assets.curated import defs as curated_defs
from assets.curated.perplexity import language_bucket, language_thresholds
from assets.curated.pii import find_pii
from assets.curated.pipeline import CurateParams, funnel
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_decision
from assets.raw import defs as raw_defs
from assets.shell import params_from
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.digest import table_digest
from iceberg_catalog.maintenance import sweep_orphan_files
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    CURATED_LANGID_VALIDATION,
    RAW_WARC_RECORDS,
)
from resources import IcebergCatalogResource, LanguageModelResource, LocalCrawlSource, TaskExecutorResource
from tests.curated.warc_records import response_record

from conftest import SAMPLE_CRAWL

CC_FILE = next(SAMPLE_CRAWL.rglob("CC-MAIN-2020-34/**/*.warc.gz"))
WGET = sorted(SAMPLE_CRAWL.rglob("wget-2024/warc/*.warc.gz"))
IGNORED = {"extract_seconds"}  # wall-clock measurements: the only columns allowed to differ between runs
DOCUMENTS_OP = "curated__documents"
EXACT_OP = "curated__exact_duplicates"
EXACT_ORDER = [("text_sha256", "ascending"), ("crawl", "ascending"), ("doc_id", "ascending")]
PROV = Provenance("curated/exact_duplicates", None, "test", "test", "test")  # records no fingerprints


class ReversedExecutor:
    """Runs the plan backwards and returns results in completion order: a stand-in for a cluster whose tasks
    finish in any order (neither the cut-offs nor the commit may care)."""

    def map(self, fn, tasks, progress=None):
        return [fn(t) for t in reversed(tasks)]


class ReversedExecutorResource(TaskExecutorResource):
    def executor(self):
        return ReversedExecutor()


class CrashBeforeBucketsExecutor:
    """Runs the curate tasks, then dies before the bucket tasks: the staged files exist, nothing is committed."""

    def map(self, fn, tasks, progress=None):
        if fn is curate.run_bucket_task:
            raise RuntimeError("executor lost")
        return [fn(t) for t in tasks]


class CrashBeforeBucketsResource(TaskExecutorResource):
    def executor(self):
        return CrashBeforeBucketsExecutor()


def resources(root: Path = SAMPLE_CRAWL, lm: str = "", executor: TaskExecutorResource | None = None) -> dict:
    return {
        "catalog": IcebergCatalogResource(),
        "executor": executor or TaskExecutorResource(),
        "crawl_source": LocalCrawlSource(root=str(root)),
        "lm": LanguageModelResource(model_path=lm),
    }


def ingest(instance, root, keys):
    instance.add_dynamic_partitions("crawl_segments", list(keys))
    for key in keys:
        assert dg.materialize(
            list(raw_defs.defs.assets), partition_key=key, instance=instance, resources=resources(root)
        ).success, key


def curate_documents(instance, root, keys, lm, run_config=None, executor=None, raise_on_error=True) -> list:
    """Materialise curated/documents for each key (raw must be there) with the curated state's Definitions."""
    results = []
    for key in keys:
        res = dg.materialize(
            list(curated_defs.defs.assets),
            partition_key=key,
            instance=instance,
            resources=resources(root, lm, executor),
            run_config=run_config,
            selection=dg.AssetSelection.assets(curated_defs.DOCUMENTS),
            raise_on_error=raise_on_error,
        )
        assert res.success or not raise_on_error, key
        results.append(res)
    return results


def curate_segments(instance, root, keys, lm, run_config=None):
    ingest(instance, root, keys)
    return curate_documents(instance, root, keys, lm, run_config)


def materialize_curated(instance, *keys, lm: str = ""):
    """Materialise unpartitioned curated assets (and their checks), e.g. curated_defs.EXACT_DUPLICATES."""
    d = curated_defs.defs
    res = dg.materialize(
        list(d.assets) + list(d.asset_checks),
        instance=instance,
        resources=resources(lm=lm),
        selection=dg.AssetSelection.assets(*keys),
    )
    assert res.success, keys
    return res


def docs(columns=None):
    return Lakehouse().scan(CURATED_DOCUMENTS, tuple(columns) if columns else None).sort_by("doc_id")


def comparable(t):
    return t.drop_columns([c for c in IGNORED if c in t.column_names]).to_pylist()


def test_knobs_have_one_definition():
    """The Launchpad config is generated from CurateParams: same defaults (the 5 s extraction timeout that always
    ran), and the config hash leaves out what cannot change a row."""
    params = params_from(CurateParams, curated_defs.CurateConfig())
    assert params == CurateParams() and params.extract_timeout_s == 5.0
    assert params.ppl_head_pct == 30.0 and params.ppl_tail_pct == 60.0
    assert not {"workers", "chunk_docs", "files_per_slice"} & set(params.hashed())
    assert params.hashed()["quality"] == dataclasses.asdict(QualityThresholds())


def test_sample_partitions_are_curated_with_reasons(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root(
        {
            "CC-MAIN-2020-34/1596439738015.38": {"a.warc.gz": CC_FILE},
            "LEGACY-ARCHIVES/wget-2024": {p.name: p for p in WGET},
        }
    )
    results = curate_segments(
        instance, root, ["CC-MAIN-2020-34/1596439738015.38", "LEGACY-ARCHIVES/wget-2024"], reference_lm_file
    )
    t = docs()
    raw = Lakehouse().scan(RAW_WARC_RECORDS, ("record_id", "content_type"))
    html = [r for r, ct in zip(raw["record_id"].to_pylist(), raw["content_type"].to_pylist()) if "html" in (ct or "")]
    assert sorted(t["record_id"].to_pylist()) == sorted(html)  # one row per HTML response record
    assert t.num_rows == 16 + 37 and len(set(t["doc_id"].to_pylist())) == t.num_rows
    rows = t.to_pylist()
    for r in rows:
        assert r["kept"] == (r["decision"] is None)
        if r["text"] is not None:
            assert r["text_sha256"] and r["n_chars"] == len(r["text"])
            assert find_pii(r["text"]) == []  # nothing unredacted is stored
            assert [n for n in QUALITY_SIGNAL_TYPES if r[n] is None] == [], (r["decision"], r["url"])
    kept = [r for r in rows if r["kept"]]
    assert kept and all(r["language_score"] >= 0.65 and r["ppl_bucket"] in ("head", "middle", "tail") for r in kept)
    assert {r["language"] for r in rows if r["language"]} >= {"en", "zh"}

    # the materialisation shows the funnel and a perplexity plot; the snapshot names its raw input
    md = instance.get_latest_materialization_event(curated_defs.DOCUMENTS).asset_materialization.metadata
    assert "kept" in md["funnel"].value
    assert "![perplexity histogram](data:image/png;base64," in md["perplexity_histogram"].value
    assert md["dagster/row_count"].value == 37 and md["tasks"].value == 2  # wget-2024: one task per WARC file
    lakehouse = Lakehouse()
    prov = Provenance.from_snapshot_summary(
        lakehouse.table(CURATED_DOCUMENTS).current_snapshot().summary.additional_properties
    )
    raw_snap = lakehouse.snapshot_id(RAW_WARC_RECORDS)
    assert prov["upstream-snapshot-ids"] == f'{{"raw.warc_records": {raw_snap}}}'
    assert prov["dagster-run-id"] == results[-1].run_id


def test_decisions_are_derived_from_stored_signals(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root({"LEGACY-ARCHIVES/wget-2024": {p.name: p for p in WGET}})
    curate_segments(instance, root, ["LEGACY-ARCHIVES/wget-2024"], reference_lm_file)
    rows = [r for r in docs().to_pylist() if r["language_score"] is not None and r["language_score"] >= 0.65]
    assert rows
    for r in rows:
        assert quality_decision(r) == r["decision"]
    # re-thresholding from the columns alone: a looser word minimum keeps short pages
    short = [r for r in rows if r["decision"] == "gopher_quality_n_words_low"]
    loose = QualityThresholds(gopher_min_words=1)
    if short:
        assert any(quality_decision(r, loose) != "gopher_quality_n_words_low" for r in short)
    assert funnel(r["decision"] for r in rows)[-1][0] == "kept"


def test_same_partition_twice_and_with_two_workers_is_identical(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    root = crawl_root({"CC-MAIN-2020-34/1596439738015.38": {"a.warc.gz": CC_FILE}})
    key = ["CC-MAIN-2020-34/1596439738015.38"]
    curate_segments(instance, root, key, reference_lm_file)
    first = comparable(docs())
    curate_documents(instance, root, key, reference_lm_file)
    assert comparable(docs()) == first
    curate_documents(
        instance,
        root,
        key,
        reference_lm_file,
        run_config={"ops": {DOCUMENTS_OP: {"config": {"workers": 2, "chunk_docs": 3}}}},
    )
    assert comparable(docs()) == first
    assert docs().num_rows == 16


def partition_files(lakehouse: Lakehouse) -> list[str]:
    """Every file in the curated.documents data folder of the test segment (committed or not)."""
    folder = Path(lakehouse.table(CURATED_DOCUMENTS).location().removeprefix("file://")) / "data"
    return sorted(p.name for p in folder.rglob("*.parquet"))


def test_one_task_or_many_in_any_order_give_the_same_documents(
    tmp_path, monkeypatch, instance, crawl_root, reference_lm_file
):
    """Three WARC files (so three raw data files): one curate task, a task per file, and a task per file run
    backwards give the same rows in the same order (raw scan order). Perplexity buckets are cut over the whole
    partition, not per task; the staged files are gone after the commit."""
    root = crawl_root({"MIXED/seg": {"0-cc.warc.gz": CC_FILE, **{f"{i + 1}-{p.name}": p for i, p in enumerate(WGET)}}})
    runs = {}
    for n, (per_slice, executor) in enumerate(((3, None), (1, None), (1, ReversedExecutorResource()))):
        monkeypatch.setenv("TOKENLAKE_HOME", str(tmp_path / f"home{n}"))
        ingest(instance, root, ["MIXED/seg"])
        (res,) = curate_documents(
            instance,
            root,
            ["MIXED/seg"],
            reference_lm_file,
            executor=executor,
            run_config={"ops": {DOCUMENTS_OP: {"config": {"files_per_slice": per_slice}}}},
        )
        md = res.asset_materializations_for_node(DOCUMENTS_OP)[0].metadata
        lakehouse = Lakehouse()
        in_scan_order = lakehouse.scan(CURATED_DOCUMENTS, ("record_id", "language", "perplexity", "ppl_bucket"))
        raw = lakehouse.scan(RAW_WARC_RECORDS, ("record_id", "warc_file", "content_type"))
        html = [
            (r, f)
            for r, f, ct in zip(*(raw[c].to_pylist() for c in ("record_id", "warc_file", "content_type")))
            if "html" in (ct or "")
        ]
        assert in_scan_order["record_id"].to_pylist() == [r for r, _ in html]  # raw scan order
        assert md["tasks"].value == 3 // per_slice and md["data_files"].value == 3 // per_slice
        assert [f for f in partition_files(lakehouse) if "-staged-" in f] == []
        runs[(per_slice, executor is not None)] = (table_digest(lakehouse, CURATED_DOCUMENTS), in_scan_order)
    (one, rows), (many, _), (backwards, _) = runs.values()
    assert one == many == backwards and one["rows"] == 53
    # buckets cut per task (per WARC file) would differ: the cut-offs really span the tasks
    per_file = defaultdict(list)
    for (_, warc_file), lang, ppl in zip(html, rows["language"].to_pylist(), rows["perplexity"].to_pylist()):
        per_file[warc_file].append((lang, ppl))
    per_task = [
        language_bucket(lang, ppl, language_thresholds(pairs)) for pairs in per_file.values() for lang, ppl in pairs
    ]
    assert per_task != rows["ppl_bucket"].to_pylist()


def test_a_crash_between_the_maps_commits_nothing_and_leaves_only_orphans(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    root = crawl_root({"LEGACY-ARCHIVES/wget-2024": {p.name: p for p in WGET}})
    key = ["LEGACY-ARCHIVES/wget-2024"]
    curate_segments(instance, root, key, reference_lm_file)
    lakehouse = Lakehouse()
    before, snapshot = table_digest(lakehouse, CURATED_DOCUMENTS), lakehouse.snapshot_id(CURATED_DOCUMENTS)
    committed = partition_files(lakehouse)
    (res,) = curate_documents(
        instance, root, key, reference_lm_file, executor=CrashBeforeBucketsResource(), raise_on_error=False
    )
    assert not res.success
    assert lakehouse.snapshot_id(CURATED_DOCUMENTS) == snapshot and table_digest(lakehouse, CURATED_DOCUMENTS) == before
    staged = [f for f in partition_files(lakehouse) if "-staged-" in f]
    assert len(staged) == 2  # one per curate task (WARC file), never referenced by a snapshot
    removed = sweep_orphan_files(lakehouse.table(CURATED_DOCUMENTS), uncommitted_min_age_seconds=0)
    assert sorted(Path(p).name for p in removed) == staged and partition_files(lakehouse) == committed


def test_hostile_pages_get_a_reason_and_the_partition_completes(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    real = gzip.decompress(CC_FILE.read_bytes())
    start = real.index(b"<html")
    page = real[start : real.index(b"</html>", start) + 7]
    records = [
        response_record(
            "http://example.org/nested", b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000
        ),
        response_record("http://example.org/huge", b"<html><body><p>" + b"word " * 4_200_000 + b"</p></body></html>"),
        response_record("http://example.org/binary", bytes(range(256)) * 2000, "text/html"),
        response_record(
            "http://example.org/bad-utf8", page.replace(b"<html", b"<html>\xff\xfe\xc3\x28"), "text/html; charset=utf-8"
        ),
        response_record("http://example.org/wrong-charset", page, "text/html; charset=utf-16"),
        response_record("http://example.org/not-found", page, status="404 Not Found"),
    ]
    root = crawl_root({"HOSTILE/seg": {"hostile.warc.gz": b"".join(records)}})
    curate_segments(instance, root, ["HOSTILE/seg"], reference_lm_file)
    by_url = {r["url"]: r for r in docs().to_pylist()}
    assert len(by_url) == len(records)
    assert by_url["http://example.org/huge"]["decision"] == "too_large"
    assert by_url["http://example.org/binary"]["decision"] == "extract_failed"
    assert by_url["http://example.org/not-found"]["decision"] == "http_status"
    assert by_url["http://example.org/nested"]["decision"] in ("empty", "extract_failed", "extract_timeout")
    for r in by_url.values():
        assert r["decision"] is None or r["decision_detail"] is not None or r["text"] is not None


def _with_new_record_id(member_bytes: bytes) -> bytes:
    data = gzip.decompress(member_bytes)
    head, sep, body = data.partition(b"\r\n\r\n")
    lines = [
        (b"WARC-Record-ID: <urn:uuid:" + str(uuid.uuid4()).encode() + b">")
        if line.startswith(b"WARC-Record-ID:")
        else line
        for line in head.split(b"\r\n")
    ]
    return gzip.compress(b"\r\n".join(lines) + sep + body, mtime=0)


@pytest.mark.parametrize("order", ["older_first", "newer_first"])
def test_exact_duplicates_across_partitions_keep_the_earliest_crawl(
    order, tokenlake_home, instance, crawl_root, reference_lm_file
):
    from warc_fixtures import members

    data = WGET[0].read_bytes()
    # the same captures re-crawled later: same payloads, new record ids (so new doc ids)
    recrawl = b"".join(_with_new_record_id(data[o : o + n]) for o, n, _ in members(data))
    root = crawl_root({"CRAWL-2023/s": {"a.warc.gz": data}, "CRAWL-2024/s": {"b.warc.gz": recrawl}})
    keys = ["CRAWL-2023/s", "CRAWL-2024/s"]
    curate_segments(instance, root, keys if order == "older_first" else keys[::-1], reference_lm_file)
    materialize_curated(instance, curated_defs.EXACT_DUPLICATES)
    t = Lakehouse().scan(CURATED_EXACT_DUPLICATES)
    d = docs(["doc_id", "crawl", "kept", "text_sha256"])
    kept_2023 = d.filter((pc.field("kept")) & (pc.field("crawl") == "CRAWL-2023"))
    assert kept_2023.num_rows > 0
    assert t.num_rows == kept_2023.num_rows  # every kept 2024 copy is a duplicate of its 2023 original
    assert set(t["crawl"].to_pylist()) == {"CRAWL-2024"} and set(t["duplicate_of_crawl"].to_pylist()) == {"CRAWL-2023"}
    assert set(t["duplicate_of"].to_pylist()) == set(kept_2023["doc_id"].to_pylist())


def test_exact_duplicates_are_the_same_for_any_shard_count_and_task_order(
    tokenlake_home, instance, crawl_root, reference_lm_file
):
    """1, 3 and 16 hash-range tasks, run forwards or backwards, commit the rows one process finds over the whole
    table (the oracle below), with the same metadata numbers; each task holds only its range and writes its own
    files, one per crawl it found duplicates in."""
    from warc_fixtures import members

    data = WGET[0].read_bytes()
    recrawl = b"".join(_with_new_record_id(data[o : o + n]) for o, n, _ in members(data))
    root = crawl_root({"CRAWL-2023/s": {"a.warc.gz": data}, "CRAWL-2024/s": {"b.warc.gz": recrawl}})
    curate_segments(instance, root, ["CRAWL-2023/s", "CRAWL-2024/s"], reference_lm_file)
    lakehouse = Lakehouse()
    snapshot = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    whole = lakehouse.scan_at(CURATED_DOCUMENTS, snapshot, curate.EXACT_COLUMNS)
    oracle = curate.exact_duplicate_rows(
        whole.filter(pc.field("kept")).select(["doc_id", "crawl", "segment", "text_sha256"])
    )
    assert oracle.num_rows > 0
    crawls = ["CRAWL-2023", "CRAWL-2024"]
    for shards in (1, 3, 16):
        tasks = curate.exact_plan(lakehouse, snapshot, curate.ExactDedupParams(shards=shards), crawls, f"s{shards}")
        results = [curate.run_exact_task(t) for t in reversed(tasks)]
        for t, r in zip(reversed(tasks), results):
            for w in r.files:  # the task's own files: one per crawl at most, only its hash range
                assert len(w.paths) <= 1 and w.partition["crawl"] in crawls
                for path in w.paths:
                    with lakehouse.file_io().new_input(path).open() as fh:
                        hashes = pq.read_table(fh, columns=["text_sha256", "crawl"]).to_pydict()
                    assert all((t.lo or "") <= h < (t.hi or "g") for h in hashes["text_sha256"])
                    assert set(hashes["crawl"]) == {w.partition["crawl"]}
        found = curate.ExactDuplicates.of(results)
        assert found.duplicates == found.written == oracle.num_rows and found.kept == pc.sum(whole["kept"]).as_py()
        assert found.decisions == Counter(d or "kept" for d in whole["decision"].to_pylist())
        curate.commit_exact_duplicates(lakehouse, results, crawls, PROV)
        table = lakehouse.scan(CURATED_EXACT_DUPLICATES)
        assert table.sort_by(EXACT_ORDER).to_pylist() == oracle.to_pylist()
    seen = set()
    for shards, executor in ((1, None), (3, ReversedExecutorResource()), (16, ReversedExecutorResource())):
        curate.commit_exact_duplicates(lakehouse, [], [], PROV)  # no record of what was read: a full rebuild
        res = dg.materialize(
            list(curated_defs.defs.assets),
            instance=instance,
            resources=resources(lm=reference_lm_file, executor=executor),
            run_config={"ops": {EXACT_OP: {"config": {"shards": shards}}}},
            selection=dg.AssetSelection.assets(curated_defs.EXACT_DUPLICATES),
        )
        md = res.asset_materializations_for_node(EXACT_OP)[0].metadata
        assert md["tasks"].value == shards and md["recomputed_crawls"].value == ", ".join(crawls)
        numbers = {k: md[k].value for k in ("dagster/row_count", "kept_before_dedup", "funnel_all_partitions")}
        seen.add((repr(numbers), repr(table_digest(lakehouse, CURATED_EXACT_DUPLICATES))))
    assert len(seen) == 1
    assert Lakehouse().scan(CURATED_EXACT_DUPLICATES).sort_by(EXACT_ORDER).to_pylist() == oracle.to_pylist()


def test_reference_lm_asset_builds_byte_identical_arpa(tokenlake_home, instance, reference_lm_file):
    from resources import reference_lm_path

    materialize_curated(instance, curated_defs.REFERENCE_LM)
    built = reference_lm_path()
    assert built.read_bytes() == open(reference_lm_file, "rb").read()
    model = kenlm.Model(str(built))
    assert model.order == 3


def test_langid_validation_asset_and_check(tokenlake_home, instance):
    res = materialize_curated(instance, curated_defs.LANGID_VALIDATION)
    md = res.asset_materializations_for_node("curated__langid_validation")[0].metadata
    assert md["macro_f1"].value >= 0.95
    t = Lakehouse().scan(CURATED_LANGID_VALIDATION)
    assert t.num_rows == 31 and "macro" in t["language"].to_pylist()
    (check,) = res.get_asset_check_evaluations()
    assert check.severity == dg.AssetCheckSeverity.WARN
    weak = [lang for lang, p in zip(t["language"].to_pylist(), t["precision"].to_pylist()) if p < 0.95]
    assert check.passed == (not [w for w in weak if w != "macro"])


def test_curated_schema_declares_every_signal():
    names = set(CURATED_DOCUMENTS.schema.column_names)
    assert set(QUALITY_SIGNAL_TYPES) <= names
    for name, kind in QUALITY_SIGNAL_TYPES.items():
        t = str(CURATED_DOCUMENTS.schema.find_field(name).field_type)
        assert t == ("long" if kind == "int" else "double"), name
