"""curated/* assets through Dagster on real WARC data, into a real catalog."""

from __future__ import annotations

import gzip
import io
import uuid

import dagster as dg
import kenlm
import pyarrow.compute as pc
import pytest
from conftest import SAMPLE_CRAWL, materialize_assets, materialize_segments
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from assets.curated.pii import find_pii
from assets.curated.pipeline import funnel
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_decision
from iceberg_catalog import Provenance, open_catalog
from iceberg_catalog.schemas import CURATED_DOCUMENTS

CC_FILE = next(SAMPLE_CRAWL.rglob("CC-MAIN-2020-34/**/*.warc.gz"))
WGET = sorted(SAMPLE_CRAWL.rglob("wget-2024/warc/*.warc.gz"))
IGNORED = {"extract_seconds"}  # wall-clock measurements: the only columns allowed to differ between runs


def curate(instance, root, keys, lm, run_config=None):
    materialize_segments(instance, root, keys)
    return materialize_segments(instance, root, keys, selection="curated/documents", lm_path=lm,
                                run_config=run_config)


def docs(columns=None):
    t = open_catalog().load_table("curated.documents").scan(
        selected_fields=tuple(columns) if columns else ("*",)).to_arrow()
    return t.sort_by("doc_id")


def comparable(t):
    return t.drop_columns([c for c in IGNORED if c in t.column_names]).to_pylist()


def test_sample_partitions_are_curated_with_reasons(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root({"CC-MAIN-2020-34/1596439738015.38": {"a.warc.gz": CC_FILE},
                       "LEGACY-ARCHIVES/wget-2024": {p.name: p for p in WGET}})
    results = curate(instance, root, ["CC-MAIN-2020-34/1596439738015.38", "LEGACY-ARCHIVES/wget-2024"],
                     reference_lm_file)
    t = docs()
    raw = open_catalog().load_table("raw.warc_records").scan(selected_fields=("record_id", "content_type")).to_arrow()
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
    md = instance.get_latest_materialization_event(dg.AssetKey(["curated", "documents"])).asset_materialization.metadata
    assert "kept" in md["funnel"].value and "![perplexity histogram](data:image/png;base64," in md["perplexity_histogram"].value
    assert md["dagster/row_count"].value == 37
    snap = open_catalog().load_table("curated.documents").current_snapshot()
    prov = Provenance.from_snapshot_summary(snap.summary.additional_properties)
    raw_snap = open_catalog().load_table("raw.warc_records").current_snapshot().snapshot_id
    assert prov["upstream-snapshot-ids"] == f'{{"raw.warc_records": {raw_snap}}}'
    assert prov["dagster-run-id"] == results[-1].run_id


def test_decisions_are_derived_from_stored_signals(tokenlake_home, instance, crawl_root, reference_lm_file):
    root = crawl_root({"LEGACY-ARCHIVES/wget-2024": {p.name: p for p in WGET}})
    curate(instance, root, ["LEGACY-ARCHIVES/wget-2024"], reference_lm_file)
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


def test_same_partition_twice_and_with_two_workers_is_identical(tokenlake_home, instance, crawl_root,
                                                                  reference_lm_file):
    root = crawl_root({"CC-MAIN-2020-34/1596439738015.38": {"a.warc.gz": CC_FILE}})
    key = ["CC-MAIN-2020-34/1596439738015.38"]
    curate(instance, root, key, reference_lm_file)
    first = comparable(docs())
    materialize_segments(instance, root, key, selection="curated/documents", lm_path=reference_lm_file)
    assert comparable(docs()) == first
    materialize_segments(instance, root, key, selection="curated/documents", lm_path=reference_lm_file,
                         run_config={"ops": {"curated__documents": {"config": {"workers": 2, "chunk_docs": 3}}}})
    assert comparable(docs()) == first
    assert docs().num_rows == 16


def _response(url: str, body: bytes, content_type: str = "text/html; charset=utf-8", status: str = "200 OK") -> bytes:
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True)
    http = StatusAndHeaders(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))],
                            protocol="HTTP/1.1")
    rec = writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http,
                                    warc_headers_dict={"WARC-Record-ID": f"<urn:uuid:{uuid.UUID(int=len(body))}>"})
    writer.write_record(rec)
    return buf.getvalue()


def test_hostile_pages_get_a_reason_and_the_partition_completes(tokenlake_home, instance, crawl_root,
                                                                  reference_lm_file):
    real = gzip.decompress(CC_FILE.read_bytes())
    start = real.index(b"<html")
    page = real[start : real.index(b"</html>", start) + 7]
    records = [
        _response("http://example.org/nested", b"<html><body>" + b"<div>" * 100_000 + b"deep" + b"</div>" * 100_000),
        _response("http://example.org/huge", b"<html><body><p>" + b"word " * 4_200_000 + b"</p></body></html>"),
        _response("http://example.org/binary", bytes(range(256)) * 2000, "text/html"),
        _response("http://example.org/bad-utf8", page.replace(b"<html", b"<html>\xff\xfe\xc3\x28") , "text/html; charset=utf-8"),
        _response("http://example.org/wrong-charset", page, "text/html; charset=utf-16"),
        _response("http://example.org/not-found", page, status="404 Not Found"),
    ]
    root = crawl_root({"HOSTILE/seg": {"hostile.warc.gz": b"".join(records)}})
    curate(instance, root, ["HOSTILE/seg"], reference_lm_file)
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
    lines = [(b"WARC-Record-ID: <urn:uuid:" + str(uuid.uuid4()).encode() + b">")
             if line.startswith(b"WARC-Record-ID:") else line for line in head.split(b"\r\n")]
    return gzip.compress(b"\r\n".join(lines) + sep + body, mtime=0)


@pytest.mark.parametrize("order", ["older_first", "newer_first"])
def test_exact_duplicates_across_partitions_keep_the_earliest_crawl(order, tokenlake_home, instance, crawl_root,
                                                                     reference_lm_file):
    from warc_fixtures import members

    data = WGET[0].read_bytes()
    # the same captures re-crawled later: same payloads, new record ids (so new doc ids)
    recrawl = b"".join(_with_new_record_id(data[o : o + n]) for o, n, _ in members(data))
    root = crawl_root({"CRAWL-2023/s": {"a.warc.gz": data}, "CRAWL-2024/s": {"b.warc.gz": recrawl}})
    keys = ["CRAWL-2023/s", "CRAWL-2024/s"]
    curate(instance, root, keys if order == "older_first" else keys[::-1], reference_lm_file)
    materialize_assets(instance, "curated/exact_duplicates")
    t = open_catalog().load_table("curated.exact_duplicates").scan().to_arrow()
    d = docs(["doc_id", "crawl", "kept", "text_sha256"])
    kept_2023 = d.filter((pc.field("kept")) & (pc.field("crawl") == "CRAWL-2023"))
    assert kept_2023.num_rows > 0
    assert t.num_rows == kept_2023.num_rows  # every kept 2024 copy is a duplicate of its 2023 original
    assert set(t["crawl"].to_pylist()) == {"CRAWL-2024"} and set(t["duplicate_of_crawl"].to_pylist()) == {"CRAWL-2023"}
    assert set(t["duplicate_of"].to_pylist()) == set(kept_2023["doc_id"].to_pylist())


def test_reference_lm_asset_builds_byte_identical_arpa(tokenlake_home, instance, reference_lm_file):
    from resources import reference_lm_path

    materialize_assets(instance, "curated/reference_lm")
    built = reference_lm_path()
    assert built.read_bytes() == open(reference_lm_file, "rb").read()
    model = kenlm.Model(str(built))
    assert model.order == 3


def test_langid_validation_asset_and_check(tokenlake_home, instance):
    res = materialize_assets(instance, "curated/langid_validation")
    md = res.asset_materializations_for_node("curated__langid_validation")[0].metadata
    assert md["macro_f1"].value >= 0.95
    t = open_catalog().load_table("curated.langid_validation").scan().to_arrow()
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
