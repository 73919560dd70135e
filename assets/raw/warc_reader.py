"""Read one WARC file into raw rows and rejects, streaming, in bounded memory, every record with its exact
gzip-member offset and length; damage stays local (see assets/raw/README.md). No Dagster here.
"""

from __future__ import annotations

import base64
import hashlib
import io
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import BinaryIO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.recordloader import ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeadersParser, StatusAndHeadersParserException

from assets.raw.urls import deletion_key, url_host

GZIP_MAGIC = b"\x1f\x8b\x08"
CHUNK_BYTES = 1 << 20
FEED_BYTES = 64 << 10
DEFAULT_MAX_RECORD_BYTES = 256 << 20

# Stable reject reasons (values of raw.rejected_records.reason).
EMPTY_FILE = "empty_file"
NOT_WARC = "not_warc"
GARBAGE_BYTES = "garbage_bytes"
CORRUPT_GZIP = "corrupt_gzip"
TRUNCATED_GZIP_MEMBER = "truncated_gzip_member"
RECORD_TOO_LARGE = "record_too_large"
BAD_WARC_HEADERS = "bad_warc_headers"
BAD_HTTP_HEADERS = "bad_http_headers"
TRUNCATED_RECORD = "truncated_record"
PAYLOAD_DIGEST_MISMATCH = "payload_digest_mismatch"
UNREADABLE_RECORD = "unreadable_record"
RECORD_LENGTH_MISMATCH = "record_length_mismatch"  # bytes after a record's Content-Length in its member

_WARC_STATUS_PARSER = StatusAndHeadersParser(ArcWarcRecordLoader.WARC_TYPES, verify=False)


@dataclass
class FileStats:
    """What one file contained: records by WARC-Type, rejects by reason, bytes read."""

    warc_file: str
    bytes_read: int = 0
    records: Counter = field(default_factory=Counter)  # WARC-Type -> count (rejects under "rejected")
    rejects: Counter = field(default_factory=Counter)  # reason -> count

    @property
    def responses(self) -> int:
        return self.records["response"]

    def as_dict(self) -> dict:
        """Plain values for a task's stats (`dataclasses.asdict` would rebuild the Counters from their items)."""
        return {
            "warc_file": self.warc_file,
            "bytes_read": self.bytes_read,
            "records": dict(self.records),
            "rejects": dict(self.rejects),
        }


@dataclass(frozen=True)
class Member:
    """A byte range of the file: a decompressed gzip member (`data`) or an unreadable region (`reason`)."""

    offset: int
    length: int
    data: bytes | None = None
    reason: str | None = None
    detail: str | None = None


def iter_gzip_members(
    stream: BinaryIO, *, max_member_bytes: int = DEFAULT_MAX_RECORD_BYTES, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[Member]:
    """Split a gzip stream into members with exact offsets; unreadable regions come back with a reason."""
    buf = b""
    buf_offset = 0  # file offset of buf[0]
    eof = False

    def fill(min_len: int) -> None:
        nonlocal buf, eof
        while not eof and len(buf) < min_len:
            chunk = stream.read(chunk_bytes)
            if not chunk:
                eof = True
            buf += chunk

    def resync(start_offset: int, reason: str, detail: str, search_from: int) -> Member:
        """Skip to the next gzip magic at or after buf[search_from]; the skipped bytes are one reject."""
        nonlocal buf, buf_offset
        pos = search_from
        while True:
            idx = buf.find(GZIP_MAGIC, pos)
            if idx >= 0:
                length = buf_offset + idx - start_offset
                buf, buf_offset = buf[idx:], buf_offset + idx
                return Member(start_offset, length, reason=reason, detail=detail)
            if eof:
                length = buf_offset + len(buf) - start_offset
                buf_offset += len(buf)
                buf = b""
                return Member(start_offset, length, reason=reason, detail=detail)
            # keep the last 2 bytes: the magic may straddle chunks
            keep = max(len(buf) - 2, pos)
            buf, buf_offset = buf[keep:], buf_offset + keep
            pos = 0
            fill(len(buf) + chunk_bytes)

    while True:
        fill(len(GZIP_MAGIC))
        if not buf:
            return
        if not buf.startswith(GZIP_MAGIC):
            yield resync(buf_offset, GARBAGE_BYTES, "bytes between gzip members are not a gzip header", 1)
            continue
        start = buf_offset
        d = zlib.decompressobj(wbits=31)
        parts: list[bytes] = []
        size = 0
        consumed = 0  # bytes of buf fed to the decompressor
        failed: str | None = None
        try:
            while True:
                if consumed >= len(buf):
                    if eof:
                        break
                    fill(len(buf) + chunk_bytes)
                    if consumed >= len(buf):
                        break
                # feed small pieces: the decompressor copies whatever follows the member into unused_data
                piece = buf[consumed : consumed + FEED_BYTES]
                consumed += len(piece)
                out = d.decompress(piece)
                if size + len(out) <= max_member_bytes:
                    parts.append(out)
                size += len(out)
                if d.eof:
                    consumed -= len(d.unused_data)
                    break
        except zlib.error as exc:
            failed = str(exc)
        if failed is not None:
            yield resync(start, CORRUPT_GZIP, failed, 1)
            continue
        if not d.eof:
            length = buf_offset + len(buf) - start
            buf_offset += len(buf)
            buf = b""
            yield Member(
                start, length, reason=TRUNCATED_GZIP_MEMBER, detail=f"gzip member ends at EOF after {length} bytes"
            )
            continue
        buf, buf_offset = buf[consumed:], buf_offset + consumed
        length = buf_offset - start
        if size > max_member_bytes:
            yield Member(
                start, length, reason=RECORD_TOO_LARGE, detail=f"{size} bytes decompressed > {max_member_bytes}"
            )
        else:
            yield Member(start, length, data=b"".join(parts))


def payload_sha1(payload: bytes) -> str:
    """The digest in WARC-Payload-Digest format: `sha1:` + base32."""
    return "sha1:" + base64.b32encode(hashlib.sha1(payload).digest()).decode("ascii")


def digest_matches(declared: str, payload: bytes) -> bool | None:
    """Check a declared `algo:value` digest (base32 or hex) against the payload; None if not checkable."""
    algo, _, value = declared.strip().partition(":")
    algo = algo.lower().replace("-", "")
    value = value.strip()
    if algo not in ("sha1", "sha256", "md5") or not value:
        return None
    raw = hashlib.new(algo, payload).digest()
    return value.upper().rstrip("=") == base64.b32encode(raw).decode("ascii").rstrip("=") or value.lower() == raw.hex()


def _parse_warc_date(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


@dataclass
class ReadContext:
    """Values stamped on every row of one partition."""

    crawl: str
    segment: str
    licence_basis: str
    ingested_at: datetime


Item = tuple[str, dict]  # ("row", raw row) | ("reject", reject row)


def _reject(
    stats: FileStats,
    ctx: ReadContext,
    warc_file: str,
    offset: int,
    length: int | None,
    reason: str,
    detail: str | None,
    headers=None,
) -> Item:
    """A ("reject", row) item, counted in `stats` here so that every reject is counted exactly once."""
    stats.records["rejected"] += 1
    stats.rejects[reason] += 1
    uri = headers.get_header("WARC-Target-URI") if headers is not None else None
    return "reject", {
        "crawl": ctx.crawl,
        "segment": ctx.segment,
        "warc_file": warc_file,
        "warc_offset": offset,
        "warc_length": length,
        "reason": reason,
        "detail": (detail or "")[:2000] or None,
        "record_id": headers.get_header("WARC-Record-ID") if headers is not None else None,
        "record_type": headers.get_header("WARC-Type") if headers is not None else None,
        "target_uri": uri,
        "deletion_key": deletion_key(uri) if uri else None,
        "ingested_at": ctx.ingested_at,
    }


def _warc_headers_of(data: bytes):
    """Best-effort parse of just the WARC header block (for naming a record we failed to read)."""
    try:
        return _WARC_STATUS_PARSER.parse(io.BytesIO(data[:65536]))
    except Exception:  # noqa: BLE001 - anything here means "could not even read the WARC headers"
        return None


def _classify_failure(data: bytes, exc: BaseException) -> tuple[str, object]:
    headers = _warc_headers_of(data)
    if headers is None or not headers.protocol.startswith("WARC/"):
        if isinstance(exc, ArchiveLoadFailed):
            return NOT_WARC, None
        return BAD_WARC_HEADERS, None
    if isinstance(exc, StatusAndHeadersParserException):
        return BAD_HTTP_HEADERS, headers
    if isinstance(exc, EOFError):
        return TRUNCATED_RECORD, headers
    return UNREADABLE_RECORD, headers


def _record_to_row(ctx: ReadContext, warc_file: str, offset: int, length: int, record, payload: bytes) -> dict:
    h = record.rec_headers
    uri = h.get_header("WARC-Target-URI") or ""
    http = record.http_headers
    status = None
    content_type = h.get_header("Content-Type")
    if http is not None:
        code = http.get_statuscode()
        status = int(code) if code and code.isdigit() else None
        content_type = http.get_header("Content-Type") or content_type
    declared = h.get_header("WARC-Payload-Digest")
    verified = digest_matches(declared, payload) if declared else None
    return {
        "record_id": h.get_header("WARC-Record-ID"),
        "deletion_key": deletion_key(uri),
        "crawl": ctx.crawl,
        "segment": ctx.segment,
        "target_uri": uri,
        "host": url_host(uri),
        "warc_date": _parse_warc_date(h.get_header("WARC-Date")),
        "http_status": status,
        "content_type": content_type,
        "payload": payload,
        "payload_length": len(payload),
        "payload_sha1": payload_sha1(payload),
        "payload_digest_declared": declared,
        "payload_digest_verified": verified,
        "warc_file": warc_file,
        "warc_offset": offset,
        "warc_length": length,
        "warc_version": h.protocol,
        "licence_basis": ctx.licence_basis,
        "ingested_at": ctx.ingested_at,
    }


def _member_response_problem(row: dict) -> tuple[str | None, str | None]:
    """Why a response row read from a gzip member is a reject, and the detail; (None, None) for a good row."""
    if row["record_id"] is None:
        return BAD_WARC_HEADERS, "response without WARC-Record-ID"
    if row["payload_digest_verified"] is False:
        return PAYLOAD_DIGEST_MISMATCH, f"declared {row['payload_digest_declared']}, computed {row['payload_sha1']}"
    return None, None


def _parse_member(ctx: ReadContext, warc_file: str, member: Member, stats: FileStats) -> Iterator[Item]:
    """Parse the WARC record(s) in one decompressed member."""
    data = member.data or b""
    if not data:
        return  # an empty gzip member holds no record (some writers emit one at EOF)
    if not data.startswith(b"WARC/"):
        # warcio would happily read such bytes as a legacy ARC record; we only accept WARC.
        detail = f"member does not start with a WARC version line: {data[:40]!r}"
        yield _reject(stats, ctx, warc_file, member.offset, member.length, NOT_WARC, detail)
        return
    n_seen = end = 0
    try:
        it = ArchiveIterator(io.BytesIO(data), verify_http=True)
        for record in it:
            n_seen += 1
            rec_type = record.rec_type or "unknown"
            payload = record.raw_stream.read()  # consume so the iterator can find the next record
            it.read_to_end(record)
            end = it.get_record_offset() + it.get_record_length()
            if rec_type != "response":
                stats.records[rec_type] += 1
                continue
            row = _record_to_row(ctx, warc_file, member.offset, member.length, record, payload)
            reason, detail = _member_response_problem(row)
            if reason is not None:
                yield _reject(stats, ctx, warc_file, member.offset, member.length, reason, detail, record.rec_headers)
            else:
                stats.records["response"] += 1
                yield "row", row
    except Exception as exc:  # noqa: BLE001 - any parser failure becomes a reject with its message
        reason, headers = _classify_failure(data, exc) if n_seen == 0 else (UNREADABLE_RECORD, None)
        detail = f"{type(exc).__name__}: {exc}"
        yield _reject(stats, ctx, warc_file, member.offset, member.length, reason, detail, headers)
        return
    if data[end:].strip(b"\r\n"):
        # warcio reads Content-Length bytes and skips what follows with only a warning: the member holds bytes
        # that no record accounts for (a block longer than its header says)
        detail = f"{len(data) - end} bytes after the last record's Content-Length in this gzip member"
        yield _reject(stats, ctx, warc_file, member.offset, member.length, RECORD_LENGTH_MISMATCH, detail)


def read_warc(
    stream: BinaryIO,
    warc_file: str,
    ctx: ReadContext,
    stats: FileStats | None = None,
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Item]:
    """Yield ("row", ...) for each readable response record and ("reject", ...) for everything unreadable."""
    stats = stats if stats is not None else FileStats(warc_file)
    head = stream.read(len(GZIP_MAGIC))
    if not head:
        yield _reject(stats, ctx, warc_file, 0, 0, EMPTY_FILE, "file has no bytes")
        return
    rest = _Prefixed(head, stream)
    if not head.startswith(GZIP_MAGIC) and not head.startswith(b"WAR"):
        yield _reject(stats, ctx, warc_file, 0, None, NOT_WARC, f"neither gzip nor WARC: starts with {head!r}")
        return
    if not head.startswith(GZIP_MAGIC):
        yield from _read_uncompressed(rest, warc_file, ctx, stats)
        stats.bytes_read = rest.position
        return
    for member in iter_gzip_members(rest, max_member_bytes=max_record_bytes):
        if member.reason is not None:
            if (
                member.offset == 0
                and member.reason in (GARBAGE_BYTES, CORRUPT_GZIP)
                and stats.bytes_read == 0
                and not stats.records
            ):
                reason = NOT_WARC if member.reason == GARBAGE_BYTES else member.reason
            else:
                reason = member.reason
            headers = _warc_headers_of(member.data) if member.data else None
            yield _reject(stats, ctx, warc_file, member.offset, member.length, reason, member.detail, headers)
        else:
            yield from _parse_member(ctx, warc_file, member, stats)
    stats.bytes_read = rest.position


def _read_uncompressed(stream: _Prefixed, warc_file: str, ctx: ReadContext, stats: FileStats) -> Iterator[Item]:
    """Plain `.warc`: warcio alone. warcio skips stray bytes between records silently, so every gap between
    one record's end and the next one's start that is more than blank lines becomes a `garbage_bytes` reject;
    after a parse error the rest of the file is one reject."""
    it = ArchiveIterator(stream, verify_http=True)
    end = 0  # where the last record read ended
    try:
        for record in it:
            # read the payload before asking for offsets: warcio's get_record_offset() reads to the end
            payload = record.raw_stream.read() if record.rec_type == "response" else None
            it.read_to_end(record)
            offset, length = it.get_record_offset(), it.get_record_length()
            if offset > end and stream.recent(end, offset).strip(b"\r\n"):
                yield _reject(stats, ctx, warc_file, end, offset - end, GARBAGE_BYTES, "bytes between records")
            end = offset + length
            if payload is None:
                stats.records[record.rec_type or "unknown"] += 1
                continue
            yield _response_item(ctx, warc_file, offset, length, record, payload, stats)
        while stream.read(CHUNK_BYTES):  # to EOF: what follows the last record must be blank too
            pass
        if stream.position > end and stream.recent(end, stream.position).strip(b"\r\n"):
            detail = "bytes after the last record"
            yield _reject(stats, ctx, warc_file, end, stream.position - end, GARBAGE_BYTES, detail)
    except Exception as exc:  # noqa: BLE001
        reason = NOT_WARC if end == 0 and not stats.records else UNREADABLE_RECORD
        yield _reject(stats, ctx, warc_file, end, None, reason, f"{type(exc).__name__}: {exc}")


def _response_item(ctx, warc_file: str, offset: int, length: int, record, payload: bytes, stats: FileStats) -> Item:
    row = _record_to_row(ctx, warc_file, offset, length, record, payload)
    if row["payload_digest_verified"] is False:
        detail = f"declared {row['payload_digest_declared']}"
        return _reject(stats, ctx, warc_file, offset, length, PAYLOAD_DIGEST_MISMATCH, detail, record.rec_headers)
    stats.records["response"] += 1
    return "row", row


class _Prefixed(io.RawIOBase):
    """A read-only stream that replays `head` before `stream`, counting bytes read and keeping the last
    `WINDOW_BYTES` read (bounded), so a reader can look back at bytes its parser skipped."""

    WINDOW_BYTES = 1 << 20

    def __init__(self, head: bytes, stream: BinaryIO) -> None:
        self._head = head
        self._stream = stream
        self.position = 0
        self._window = bytearray()

    def recent(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file if still in the window; else a placeholder that is not blank."""
        first = self.position - len(self._window)
        if start < first or end > self.position:
            return b"?"
        return bytes(self._window[start - first : end - first])

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            if n is None or n < 0:
                out = self._head + self._stream.read()
                self._head = b""
            else:
                out, self._head = self._head[:n], self._head[n:]
                if len(out) < n:
                    out += self._stream.read(n - len(out))
        else:
            out = self._stream.read() if n is None or n < 0 else self._stream.read(n)
        self.position += len(out)
        self._window += out
        if len(self._window) > 2 * self.WINDOW_BYTES:
            del self._window[: len(self._window) - self.WINDOW_BYTES]
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)
