"""Bad input at scale: random and mutated WARC bytes through the raw ingest's reader (hypothesis).

Mutations start from real WARCs of the sample crawl: bit flips, deleted, inserted and duplicated byte ranges,
truncation, and edits inside a decompressed record that is then recompressed (so the gzip layer is intact and
the WARC and HTTP parsers see the damage). For every input the reader must not raise, must read the whole
file, and must account for every byte: each byte range is a stored row, a reject with a reason, or whole
records that are not responses (counted, not stored), checked here with warcio on its own.
The raw asset itself is tested at the end: a segment of such files materialised through Dagster into a real
catalog stores exactly the reader's rows and rejects, file by file.
"""

from __future__ import annotations

import gzip
import io
import os
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from assets.raw.warc_reader import FileStats, ReadContext, iter_gzip_members, read_warc
from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import RAW_REJECTED_RECORDS, RAW_WARC_RECORDS

from conftest import materialize_segments
from warc_fixtures import CC_2020, members

REPO = Path(__file__).resolve().parents[2]
CC_2024 = next((REPO / "data/sample_crawl/crawl-data/CC-MAIN-2024-22").rglob("*.warc.gz"))
CTX = ReadContext("CRAWL", "SEG", "test licence", datetime(2026, 1, 1, tzinfo=UTC))
EXAMPLES = int(os.environ.get("TOKENLAKE_FUZZ_EXAMPLES", "150"))


def _base_files() -> list[bytes]:
    """Real WARCs: the 2024 file (18 KB) and the first 12 members of the 2020 file (a few KB each)."""
    cc2020 = CC_2020.read_bytes()
    cut = members(cc2020)[12][0]
    return [CC_2024.read_bytes(), cc2020[:cut]]


BASES = _base_files()


def _recompress(data: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as g:
        g.write(data)
    return out.getvalue()


@st.composite
def mutation(draw, data: bytes) -> bytes:
    """One random edit of `data`."""
    n = len(data)
    kind = draw(st.sampled_from(["flip", "delete", "insert", "truncate", "duplicate", "record_edit"]))
    at = draw(st.integers(0, max(n - 1, 0)))
    span = draw(st.integers(1, 4096))
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :] if n else data
    if kind == "delete":
        return data[:at] + data[at + span :]
    if kind == "insert":
        junk = draw(st.binary(min_size=1, max_size=300) | st.just(b"\x1f\x8b\x08") | st.just(b"WARC/1.0\r\n"))
        return data[:at] + junk + data[at:]
    if kind == "truncate":
        return data[:at]
    if kind == "duplicate":
        return data[:at] + data[at : at + span] + data[at:]
    ms = members(data)
    valid = [(o, ln, d) for o, ln, d in ms if d]
    if not valid:
        return data
    o, ln, d = draw(st.sampled_from(valid))
    pos = draw(st.integers(0, len(d)))
    edit = draw(
        st.sampled_from([b"", b"\r\n", b":", b"\x00", b"HTTP/1.1 ", b"Content-Length: 99999999\r\n", b"x" * 50])
    )
    cut = draw(st.integers(0, 64))
    return data[:o] + _recompress(d[:pos] + edit + d[pos + cut :]) + data[o + ln :]


@st.composite
def warc_bytes(draw) -> tuple[str, bytes]:
    """(how it was made, bytes): a real WARC with 1-4 mutations, its uncompressed form mutated, or noise."""
    source = draw(st.sampled_from(["gzip", "plain", "noise", "gzip_noise"]))
    if source == "noise":
        return source, draw(st.binary(max_size=4096))
    if source == "gzip_noise":
        return source, b"\x1f\x8b\x08" + draw(st.binary(max_size=4096))
    data = draw(st.sampled_from(BASES))
    if source == "plain":
        data = b"".join(d or b"" for _, _, d in members(data))
    for _ in range(draw(st.integers(1, 4))):
        data = draw(mutation(data))
    return source, data


def _read(data: bytes):
    stats = FileStats("f.warc.gz")
    items = list(read_warc(io.BytesIO(data), "f.warc.gz", CTX, stats))
    return items, stats


def _only_other_records(gap: bytes) -> bool:
    """Whether `gap` is whole, readable WARC records none of which is a response (checked with warcio)."""
    chunks = [m.data for m in iter_gzip_members(io.BytesIO(gap))] if gap.startswith(b"\x1f\x8b\x08") else [gap]
    for chunk in chunks:
        if chunk is None:
            return False
        chunk = chunk.lstrip(b"\r\n")  # the blank lines that end the previous record
        if not chunk:
            continue  # an empty gzip member holds no record
        if not chunk.startswith(b"WARC/"):
            return False
        it = ArchiveIterator(io.BytesIO(chunk))
        end = 0
        try:
            for record in it:
                if record.rec_type == "response":
                    return False
                it.read_to_end(record)
                end = it.get_record_offset() + it.get_record_length()
        except Exception:  # noqa: BLE001 - unreadable bytes that nothing accounted for
            return False
        if chunk[end:].strip(b"\r\n"):
            return False
    return True


def check_accounting(data: bytes) -> Counter:
    """The invariants, for one input; returns the kinds of outcome seen (for the test's statistics)."""
    items, stats = _read(data)  # must not raise
    rows = [i for k, i in items if k == "row"]
    rejects = [i for k, i in items if k == "reject"]
    rest_rejected = bool(rejects) and rejects[-1]["warc_length"] is None  # "the rest of the file" (or all of it)
    assert stats.bytes_read == len(data) or rest_rejected or data == b"", (stats.bytes_read, len(data))
    assert stats.records["response"] == len(rows)
    assert sum(stats.rejects.values()) == stats.records["rejected"] == len(rejects)
    assert all(r["reason"] and r["warc_file"] == "f.warc.gz" for r in rejects)
    ranges = set()
    for r in rows + rejects:
        start, length = r["warc_offset"], r["warc_length"]
        end = len(data) if length is None else start + length
        assert 0 <= start <= end <= len(data), (start, length, len(data))
        ranges.add((start, end))
    covered = sorted(ranges)
    pos = 0
    for start, end in covered:
        if start > pos:
            assert _only_other_records(data[pos:start]), f"bytes {pos}..{start} are neither a row nor a reject"
        pos = max(pos, end)
    if pos < len(data):
        assert _only_other_records(data[pos:]), f"bytes {pos}..{len(data)} are neither a row nor a reject"
    return Counter({"rows": len(rows), "rejects": len(rejects), **{f"reject:{k}": v for k, v in stats.rejects.items()}})


SEEN: Counter = Counter()


@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(warc_bytes())
def test_random_and_mutated_warc_bytes_never_crash_and_every_byte_is_accounted(case):
    source, data = case
    SEEN.update(check_accounting(data))
    SEEN["examples"] += 1
    SEEN[f"source:{source}"] += 1


def test_the_fuzz_reached_every_kind_of_damage():
    """The property test above is only as good as what it generated: it must have produced rows and rejects
    of several reasons (run in the same session, after it)."""
    if SEEN["examples"] == 0:
        pytest.skip("run together with the property test")
    reasons = {k for k in SEEN if k.startswith("reject:")}
    print(f"\nfuzz: {dict(sorted(SEEN.items()))}")
    assert SEEN["rows"] > 0 and SEEN["rejects"] > 0
    assert len(reasons) >= 4, reasons


def test_unmutated_bases_are_accounted_by_rows_and_other_records_only():
    for data in BASES:
        seen = check_accounting(data)
        assert seen["rejects"] == 0 and seen["rows"] > 0


def fuzzed_files(n: int) -> list[bytes]:
    """The first `n` inputs of the property test's generator, the same ones on every run (derandomised, no
    example database)."""
    drawn: list[bytes] = []

    @settings(
        max_examples=n,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(warc_bytes())
    def draw(case):
        drawn.append(case[1])

    draw()
    return drawn


def test_the_raw_asset_ingests_a_segment_of_fuzzed_files(tokenlake_home, instance, crawl_root):
    """The raw asset itself, materialised by Dagster into a real catalog, on one segment of fuzzed files: the run
    succeeds, and per file the stored rows and the rejects by reason are exactly the reader's, which the property
    test above holds to account for every byte."""
    files = {f"{i:02d}.warc.gz": data for i, data in enumerate(fuzzed_files(16))}
    want = {}
    for name, data in files.items():
        check_accounting(data)
        items, _ = _read(data)
        want[name] = (sum(k == "row" for k, _ in items), Counter(i["reason"] for k, i in items if k == "reject"))
    materialize_segments(instance, crawl_root({"FUZZ/seg-1": files}), ["FUZZ/seg-1"])
    lakehouse = Lakehouse()
    rows = Counter(Path(f).name for f in lakehouse.scan(RAW_WARC_RECORDS, ("warc_file",))["warc_file"].to_pylist())
    rejected = lakehouse.scan(RAW_REJECTED_RECORDS, ("warc_file", "reason"))
    rejects = {name: Counter() for name in files}
    for f, reason in zip(rejected["warc_file"].to_pylist(), rejected["reason"].to_pylist()):
        rejects[Path(f).name][reason] += 1
    assert {name: (rows[name], rejects[name]) for name in files} == want
    assert sum(rows.values()) > 0 and len({r for c in rejects.values() for r in c}) >= 3, (rows, rejects)
