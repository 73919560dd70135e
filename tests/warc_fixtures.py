"""Bad WARC inputs built from the real sample files, each with the accounting it must produce."""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass
from pathlib import Path

from assets.raw.warc_reader import iter_gzip_members

REPO = Path(__file__).resolve().parents[1]
CC_2020 = next((REPO / "data/sample_crawl/crawl-data/CC-MAIN-2020-34").rglob("*.warc.gz"))
AUT_0_17 = next((REPO / "data/sample_crawl/crawl-data/LEGACY-ARCHIVES/segments/heritrix-2008").rglob("*.warc.gz"))


@dataclass(frozen=True)
class BadCase:
    name: str
    data: bytes
    rows: int  # response records that must be stored
    rejects: dict[str, int]  # reason -> count that must be recorded
    records_in_file: int  # responses + unreadable units, counted independently of the reader


def members(data: bytes) -> list[tuple[int, int, bytes]]:
    return [(m.offset, m.length, m.data) for m in iter_gzip_members(io.BytesIO(data))]


def _is_response(decompressed: bytes) -> bool:
    return b"\r\nWARC-Type: response\r\n" in decompressed.split(b"\r\n\r\n", 1)[0] + b"\r\n"


def _recompress(decompressed: bytes) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as g:
        g.write(decompressed)
    return out.getvalue()


def _replace_member(data: bytes, index: int, new_member: bytes) -> bytes:
    offset, length, _ = members(data)[index]
    return data[:offset] + new_member + data[offset + length :]


def _response_indexes(data: bytes) -> list[int]:
    return [i for i, (_, _, d) in enumerate(members(data)) if _is_response(d)]


def bad_cases() -> list[BadCase]:
    base = CC_2020.read_bytes()
    n_resp = len(_response_indexes(base))
    ms = members(base)
    resp = _response_indexes(base)
    cases = []

    # 1. truncated gzip member: cut the file in the middle of the last response record's member.
    last = resp[-1]
    off, length, _ = ms[last]
    cases.append(
        BadCase("truncated_gzip_member", base[: off + length // 2], n_resp - 1, {"truncated_gzip_member": 1}, n_resp)
    )

    # 2. garbage bytes between two records (no gzip magic inside).
    off, length, _ = ms[resp[3]]
    garbage = b"\x00GARBAGE between records, not gzip \xff\xfe" * 40
    cases.append(
        BadCase(
            "garbage_bytes",
            base[: off + length] + garbage + base[off + length :],
            n_resp,
            {"garbage_bytes": 1},
            n_resp + 1,
        )
    )

    # 3. wrong payload digest: one response's WARC-Payload-Digest changed (same length), member recompressed.
    i = resp[5]
    d = ms[i][2]
    head, sep, body = d.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    for k, line in enumerate(lines):
        if line.startswith(b"WARC-Payload-Digest: sha1:"):
            value = line.split(b":", 2)[2]
            lines[k] = b"WARC-Payload-Digest: sha1:" + (b"A" if value[:1] != b"A" else b"B") + value[1:]
    cases.append(
        BadCase(
            "payload_digest_mismatch",
            _replace_member(base, i, _recompress(b"\r\n".join(lines) + sep + body)),
            n_resp - 1,
            {"payload_digest_mismatch": 1},
            n_resp,
        )
    )

    # 4. empty file.
    cases.append(BadCase("empty_file", b"", 0, {"empty_file": 1}, 1))

    # 5. non-WARC files: a gzip of plain text, and plain bytes that are not gzip at all.
    cases.append(BadCase("not_warc_gzip", _recompress((REPO / "pyproject.toml").read_bytes()), 0, {"not_warc": 1}, 1))
    cases.append(BadCase("not_warc_plain", b"%PDF-1.4 this is not a WARC file\n" * 50, 0, {"not_warc": 1}, 1))

    # 6. a response whose HTTP status line is broken.
    i = resp[7]
    d = ms[i][2]
    d = d.replace(b"\r\n\r\nHTTP/1.1 ", b"\r\n\r\nHTXP/1.1 ", 1).replace(b"\r\n\r\nHTTP/1.0 ", b"\r\n\r\nHTXP/1.0 ", 1)
    cases.append(
        BadCase(
            "bad_http_headers", _replace_member(base, i, _recompress(d)), n_resp - 1, {"bad_http_headers": 1}, n_resp
        )
    )

    # 7. corrupt deflate data inside a member (bit flips in the middle of the compressed stream).
    off, length, _ = ms[resp[9]]
    mid = off + length // 2
    flipped = bytes(b ^ 0x5A for b in base[mid : mid + 64])
    cases.append(
        BadCase("corrupt_gzip", base[:mid] + flipped + base[mid + 64 :], n_resp - 1, {"corrupt_gzip": 1}, n_resp)
    )
    return cases
