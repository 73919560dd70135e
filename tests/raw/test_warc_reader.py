"""The pure WARC reader against the real sample files and bad inputs built from them."""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

from assets.raw.urls import deletion_key
from assets.raw.warc_reader import FileStats, ReadContext, digest_matches, payload_sha1, read_warc

from warc_fixtures import AUT_0_17, bad_cases

REPO = Path(__file__).resolve().parents[2]
SAMPLE_FILES = sorted((REPO / "data" / "sample_crawl").rglob("*.warc.gz"))
CTX = ReadContext("CRAWL", "SEG", "test licence", datetime(2026, 1, 1, tzinfo=UTC))


def _read(data: bytes, name: str = "f.warc.gz"):
    stats = FileStats(name)
    items = list(read_warc(io.BytesIO(data), name, CTX, stats))
    rows = [r for k, r in items if k == "row"]
    rejects = [r for k, r in items if k == "reject"]
    return rows, rejects, stats


def _warcio_responses(path: Path) -> dict[str, bytes]:
    """Independent count: record id -> payload, straight from warcio over the whole file."""
    out = {}
    with open(path, "rb") as fh:
        for rec in ArchiveIterator(fh):
            if rec.rec_type == "response":
                out[rec.rec_headers.get_header("WARC-Record-ID")] = rec.raw_stream.read()
    return out


def test_sample_crawl_has_six_real_files():
    assert len(SAMPLE_FILES) == 6
    assert AUT_0_17 in SAMPLE_FILES


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_response_record_is_stored_with_its_payload(path: Path):
    rows, rejects, stats = _read(path.read_bytes(), path.name)
    expected = _warcio_responses(path)
    assert rejects == []
    assert len(rows) == len(expected) == stats.responses
    assert {r["record_id"] for r in rows} == set(expected)
    for r in rows:
        assert r["payload"] == expected[r["record_id"]]
        assert r["payload_sha1"] == payload_sha1(expected[r["record_id"]])
        assert r["payload_digest_verified"] in (True, None)  # None: the WARC declares no digest
        if r["payload_digest_declared"]:
            assert r["payload_digest_declared"] == r["payload_sha1"]
    # every record of the file is accounted for exactly once
    with open(path, "rb") as fh:
        all_types = Counter(rec.rec_type for rec in ArchiveIterator(fh))
    assert stats.records == all_types
    assert stats.bytes_read == path.stat().st_size


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_rereading_at_stored_offset_and_length_yields_the_same_record(path: Path):
    rows, _, _ = _read(path.read_bytes(), path.name)
    with open(path, "rb") as fh:
        for r in rows:
            fh.seek(r["warc_offset"])
            chunk = fh.read(r["warc_length"])
            rec = next(iter(ArchiveIterator(io.BytesIO(chunk))))
            assert rec.rec_headers.get_header("WARC-Record-ID") == r["record_id"]
            assert rec.raw_stream.read() == r["payload"]


def test_warc_0_17_heritrix_file_ingests():
    rows, rejects, stats = _read(AUT_0_17.read_bytes())
    assert rejects == []
    assert len(rows) == 299
    assert {r["warc_version"] for r in rows} == {"WARC/0.17"}
    assert stats.records["request"] == 261 and stats.records["metadata"] == 261
    dns = [r for r in rows if r["target_uri"].startswith("dns:")]
    assert dns and all(r["http_status"] is None and r["host"] is None for r in dns)


def test_row_fields_are_typed_and_stamped():
    rows, _, _ = _read(SAMPLE_FILES[0].read_bytes())
    r = rows[0]
    assert r["crawl"] == "CRAWL" and r["segment"] == "SEG" and r["licence_basis"] == "test licence"
    assert r["warc_date"].tzinfo is not None
    assert isinstance(r["http_status"], int)
    assert r["deletion_key"] == deletion_key(r["target_uri"]) and len(r["deletion_key"]) == 64
    assert r["host"] and r["host"] == r["host"].lower()


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c.name)
def test_bad_input_is_accounted_for(case):
    rows, rejects, stats = _read(case.data, case.name)
    assert len(rows) == case.rows
    assert dict(Counter(r["reason"] for r in rejects)) == case.rejects
    assert len(rows) + len(rejects) == case.records_in_file
    assert all(r["reason"] and r["warc_file"] == case.name and r["warc_offset"] >= 0 for r in rejects)
    assert stats.records["rejected"] == len(rejects)


def test_uncompressed_warc_is_read_with_offsets():
    import gzip

    data = gzip.decompress((REPO / "data" / "jwarc_cc.warc.gz").read_bytes())
    rows, rejects, _ = _read(data, "plain.warc")
    assert rejects == [] and len(rows) == 1
    assert rows[0]["warc_offset"] == 0 and 0 < rows[0]["warc_length"] <= len(data)
    assert rows[0]["payload_digest_verified"] is True


@pytest.mark.parametrize(
    "declared,payload,expected",
    [
        (payload_sha1(b"abc"), b"abc", True),
        (payload_sha1(b"abc"), b"abd", False),
        ("sha1:" + hashlib.sha1(b"abc").hexdigest(), b"abc", True),
        ("sha256:" + hashlib.sha256(b"abc").hexdigest(), b"abc", True),
        ("crc32:1234", b"abc", None),
        ("sha1:", b"abc", None),
    ],
)
def test_digest_formats(declared, payload, expected):
    assert digest_matches(declared, payload) is expected
