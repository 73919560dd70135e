"""HTML -> main text: charset decoding, main-text extraction under size and time limits, normalisation.

Pure module (no Dagster). Two extraction engines (`ENGINES`): trafilatura (the default, FineWeb's) and
resiliparse (`extract_plain_text`, C++ on lexbor, DCLM's). Either runs in one persistent worker subprocess
per `Extractor` (the way datatrove sandboxes trafilatura): a document that exceeds the time limit gets the
decision `extract_timeout`, its worker is killed and a fresh one takes the next document, so one
pathological page can neither stall nor crash a batch. Fresh workers are forked from a warmed-up template
process (`_Template`), so a restart costs a fork, not an interpreter start and the engine's warm-up.
Decoding, limits and normalisation happen outside the engine, so both engines get the same input.
Decisions (values of the `decision` column):

- `too_large`       payload above `max_html_bytes` (not truncated: a cut page looks whole but is not)
- `extract_failed`  binary bytes labelled as text, or the engine raised / its worker died
- `extract_timeout` extraction took longer than `timeout_s`
- `empty`           no main text left after extraction and normalisation
"""

from __future__ import annotations

import codecs
import functools
import logging
import os
import pickle
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import unicodedata
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, get_args

# Published defaults: datatrove's Trafilatura extractor (FineWeb) uses favour_precision, deduplicate and no
# comments. Its per-document timeout is 1 s wall-clock; ours counts the worker's CPU seconds and is the
# `extract_timeout_s` knob's default (CurateParams): a safety net well above what ordinary pages need, so no
# decision depends on timing jitter.
DEFAULT_TIMEOUT_S = 5.0
# Common Crawl truncates payloads at 1 MiB; 5 MB leaves room for other crawls while bounding memory and
# IPC per document.
DEFAULT_MAX_HTML_BYTES = 5_000_000
DEFAULT_TRAFILATURA_OPTIONS: dict = {
    "favor_precision": True,
    "include_comments": False,
    "deduplicate": True,
}
Engine = Literal["trafilatura", "resiliparse"]
ENGINES: tuple[str, ...] = get_args(Engine)
DEFAULT_ENGINE: Engine = "trafilatura"
# resiliparse as DCLM runs it (main content, block structure kept), with our use's choices pinned rather than
# left to the library's defaults: list items kept with their bullets, no alt texts, form fields or link
# targets (not prose), and no comment sections (as the trafilatura path: FineWeb's include_comments=False).
DEFAULT_RESILIPARSE_OPTIONS: dict = {
    "preserve_formatting": True,
    "main_content": True,
    "list_bullets": True,
    "alt_texts": False,
    "form_fields": False,
    "links": False,
    "comments": False,
}
DEFAULT_OPTIONS = {"trafilatura": DEFAULT_TRAFILATURA_OPTIONS, "resiliparse": DEFAULT_RESILIPARSE_OPTIONS}

DECISION_TOO_LARGE = "too_large"
DECISION_EXTRACT_FAILED = "extract_failed"
DECISION_EXTRACT_TIMEOUT = "extract_timeout"
DECISION_EMPTY = "empty"

# ---------------------------------------------------------------------------------------------------
# Decoding

# Control bytes that never occur in text (tab, LF, FF, CR excluded; ESC too, as ISO-2022 encodings use
# it). Random/compressed bytes have ~11% of them, real HTML almost none; 1% separates the two widely.
_CONTROL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x1B), *range(0x1C, 0x20), 0x7F])
DEFAULT_MAX_CONTROL_SHARE = 0.01
_BINARY_MAGIC = (
    (b"%PDF-", "pdf"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x1f\x8b", "gzip"),
    (b"PK\x03\x04", "zip"),
    (b"\x7fELF", "elf"),
    (b"RIFF", "riff"),
    (b"\x00\x00\x01\x00", "ico"),
    (b"wOFF", "woff"),
    (b"wOF2", "woff2"),
)
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# Browsers (WHATWG Encoding Standard) decode these labels with a superset; pages rely on that.
_WHATWG_SUPERSETS = {
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "tis-620": "cp874",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "euc_kr": "cp949",
    "shift_jis": "cp932",
    "big5": "big5hkscs",
}
_NOT_PAGE_ENCODINGS = frozenset({"idna", "punycode", "unicode-escape", "raw-unicode-escape", "undefined", "utf-7"})
_CT_CHARSET_RE = re.compile(rb"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.I)
_META_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.I)
# WHATWG prescans 1024 bytes; real pages often put <meta charset> after long scripts, so look further.
_META_SCAN_BYTES = 4096
# A declared charset still wins over cp1252 if it only needs to replace this share of characters.
_MAX_REPLACEMENT_SHARE = 0.01
# C0 controls lxml refuses (XML 1.0 forbids them), and C1 controls, which in decoded HTML are only ever
# mis-decoded bytes; HTML needs neither.
_CONTROL_CHARS_RE = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
# The same characters as bytes of their UTF-8 (or ASCII) encoding: C0 and DEL are single bytes that never occur
# inside a multi-byte sequence, and C1 is 0xC2 then 0x80-0x9F (0xC2 is only ever a lead byte).
_C0_DEL_BYTES = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
_C1_UTF8_RE = re.compile(rb"\xc2[\x80-\x9f]")


def _without_controls(text: str, utf8: bytes | None = None) -> str:
    """`text` without the characters of `_CONTROL_CHARS_RE`. `utf8`: the UTF-8 bytes `text` was decoded from,
    when at hand: scanning bytes for them is ~10x faster than the regex, and real pages rarely have any."""
    if utf8 is None and text.isascii():
        utf8 = text.encode("ascii")
    if utf8 is not None and len(utf8.translate(None, _C0_DEL_BYTES)) == len(utf8) and not _C1_UTF8_RE.search(utf8):
        return text
    return _CONTROL_CHARS_RE.sub("", text)


def _codec_name(label: bytes | str | None) -> str | None:
    """Python codec for a charset label (WHATWG superset applied), or None if unknown."""
    if not label:
        return None
    if isinstance(label, bytes):
        label = label.decode("ascii", "ignore")
    try:
        info = codecs.lookup(label.strip().lower())
    except LookupError:
        return None
    # Python's registry also holds bytes-to-bytes and escape codecs (base64, zlib, idna, unicode_escape);
    # no web page is in one of those whatever its label says, and browsers refuse UTF-7.
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_PAGE_ENCODINGS:
        return None
    return _WHATWG_SUPERSETS.get(info.name, info.name)


def binary_reason(payload: bytes, max_control_share: float = DEFAULT_MAX_CONTROL_SHARE) -> str | None:
    """Why `payload` looks like binary data rather than text (magic number / control bytes), else None."""
    if any(payload.startswith(bom) for bom, name in _BOMS if name.startswith(("utf-16", "utf-32"))):
        return None  # NUL bytes are expected in UTF-16/32
    for magic, kind in _BINARY_MAGIC:
        if payload.startswith(magic):
            return f"binary payload ({kind} signature)"
    if not payload:
        return None
    n_control = len(payload) - len(payload.translate(None, _CONTROL_BYTES))
    share = n_control / len(payload)
    if share > max_control_share:
        return f"binary payload ({share:.1%} control bytes)"
    return None


def decode_html(payload: bytes, content_type: str | None) -> str | None:
    """Decode HTML bytes to str (BOM, valid UTF-8, HTTP charset, <meta> charset, cp1252); None for binary data.

    Control characters (C0 except tab/LF/FF/CR, and C1) are removed from the result.
    """
    text, _ = _decode_html(payload, content_type)
    return text


def _decode_html(payload: bytes, content_type: str | None) -> tuple[str | None, str | None]:
    """`decode_html` plus the reason for a None / the codec that was used."""
    for bom, name in _BOMS:
        if payload.startswith(bom):
            return _CONTROL_CHARS_RE.sub("", payload[len(bom) :].decode(name, "replace")), name
    reason = binary_reason(payload)
    if reason is not None:
        return None, reason
    # Valid UTF-8 with multi-byte sequences is next to never another encoding by chance, while a server's
    # default "charset=iso-8859-1" on a UTF-8 page is common; trafilatura decides the same way.
    if not payload.isascii():
        try:
            return _without_controls(payload.decode("utf-8"), payload), "utf-8"
        except UnicodeDecodeError:
            pass

    declared: list[str] = []
    if content_type:
        m = _CT_CHARSET_RE.search(content_type.encode("latin-1", "replace"))
        if m:
            declared.append(m.group(1))  # type: ignore[arg-type]
    m = _META_CHARSET_RE.search(payload[:_META_SCAN_BYTES])
    if m:
        declared.append(m.group(1))  # type: ignore[arg-type]
    codecs_to_try: list[str] = []
    for label in declared:
        name = _codec_name(label)
        # Here a UTF-16/32 label is a copied one: real UTF-16/32 has a BOM (handled above) or else NUL
        # bytes (rejected above as binary; UTF-16 without a BOM is vanishingly rare on the web).
        if name and not name.startswith(("utf-16", "utf-32")) and name not in codecs_to_try:
            codecs_to_try.append(name)
    if "utf-8" not in codecs_to_try:
        codecs_to_try.append("utf-8")

    for name in codecs_to_try:
        try:
            text = payload.decode(name)
        except (UnicodeError, LookupError):
            continue
        return _without_controls(text, payload if name == "utf-8" else None), name
    # Nothing decodes strictly: keep a declared charset (or UTF-8) if it needs few replacements,
    # otherwise cp1252, which maps all but five byte values and so loses the least.
    for name in codecs_to_try:
        try:
            text = payload.decode(name, "replace")
        except (UnicodeError, LookupError):
            continue
        if text.count("\ufffd") <= _MAX_REPLACEMENT_SHARE * max(len(text), 1):
            return _CONTROL_CHARS_RE.sub("", text), f"{name}+replace"
    return _CONTROL_CHARS_RE.sub("", payload.decode("cp1252", "replace")), "cp1252+replace"


# ---------------------------------------------------------------------------------------------------
# Normalisation

# One character class first (then "\r\n" as a whole): re scans for a leading class much faster than for an
# alternation (~2x on extracted pages); same matches as "\r\n|[\r\x0b\x0c\x85\u2028\u2029]".
_LINE_BREAKS_RE = re.compile("[\r\x0b\x0c\x85\u2028\u2029](?:(?<=\r)\n)?")
# Runs of horizontal white space that are not already one plain space (replacing those too gives the same text,
# at the cost of one regex match per word): a run of two or more, or one character that is not a space. Written
# with one leading class (the same matches as r"[^\S\n]{2,}|[^\S\n ]"), which re scans ~2x faster.
_HSPACE_RE = re.compile(r"[^\S\n](?:[^\S\n]+|(?<! ))")
# Written as r"\n{3,}" reads; a literal prefix lets re jump to "\n\n\n" instead of trying every position (~13x).
_BLANK_LINES_RE = re.compile(r"\n\n\n+")


def normalise_text(text: str) -> str:
    """NFC, one space for each run of horizontal whitespace, stripped lines, at most one blank line."""
    text = _CONTROL_CHARS_RE.sub("", _LINE_BREAKS_RE.sub("\n", text))
    text = _HSPACE_RE.sub(" ", text)
    text = "\n".join(line.strip(" ") for line in text.split("\n"))
    text = _BLANK_LINES_RE.sub("\n\n", text).strip()
    # NFC last: removing a control character may bring a base letter and a combining mark together.
    return unicodedata.normalize("NFC", text)


# ---------------------------------------------------------------------------------------------------
# Extraction


@dataclass(frozen=True, slots=True)
class ExtractionResult:
    """Main text (None when dropped), the decision (None when kept), wall seconds and a human detail.

    `seconds` is the wall time of the call; the first call of an Extractor includes its template's start (~0.5 s).
    """

    text: str | None
    decision: str | None
    seconds: float
    detail: str | None = None


class ExtractorError(RuntimeError):
    """The extraction worker could not be started: the environment (or the engine's options), not a document,
    is broken."""


_FRAME = struct.Struct("<Q")
Setup = tuple[str, dict]  # (engine, its options): what a worker or template is configured with


def _write_frame(fd: int, obj: object) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_FRAME.pack(len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes | None:
    """n bytes from fd; None at the deadline; EOFError if the writer is gone."""
    chunks: list[bytes] = []
    while n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("extraction worker closed its pipe")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None) -> tuple[bool, object]:
    """(True, obj) or (False, None) at the deadline."""
    header = _read_exact(fd, _FRAME.size, deadline)
    if header is None:
        return False, None
    (size,) = _FRAME.unpack(header)
    # Once the header is there the body follows at pipe speed; don't let the deadline cut a frame.
    body = _read_exact(fd, size, None)
    return True, pickle.loads(body)  # noqa: S301 - our own child process


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_POLL_S = 0.02
# A template answers a fork or kill request in milliseconds; this only bounds a hung one.
_TEMPLATE_REPLY_S = 10.0
# The template warms up on this page before it forks, so lazy first-use costs (lxml parsers, trafilatura's
# settings and XPath compilation) are paid once per template, not on each new worker's first page.
_WARM_UP_HTML = (
    "<html><head><title>Warm-up</title></head><body><article><h1>Warm-up</h1>"
    + "<p>This paragraph only exists so that the extraction code paths run once before forking.</p>" * 4
    + "<ul><li>one</li><li>two</li></ul><table><tr><td>cell</td></tr></table></article></body></html>"
)


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), or None where that is not readable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14, 15)
    except (OSError, IndexError, ValueError):
        return None


def _script(mode: str, *args: str) -> list[str]:
    """Command line of a fresh interpreter (not fork: callers may hold threads and locks) running this file."""
    return [sys.executable, "-u", os.path.abspath(__file__), mode, *args]


class _Worker:
    """One extraction process speaking length-prefixed pickles: requests on `req_fd`, replies on `reply_fd`.

    `stop` kills the process and closes the pipes; it runs once (on `close`, or when the handle is collected)."""

    def __init__(self, pid: int, req_fd: int, reply_fd: int, stop) -> None:
        self.pid = pid
        self.req_fd = req_fd
        self.reply_fd = reply_fd
        self.n_docs = 0
        self._finalizer = weakref.finalize(self, stop)

    def request(self, html: str, url: str | None, timeout_s: float) -> tuple[str, object]:
        """('ok', text|None) | ('error', message) | ('timeout', None) | ('died', message)."""
        self.n_docs += 1
        fd = self.reply_fd
        try:
            cpu0 = _cpu_seconds(self.pid)
            _write_frame(self.req_fd, (html, url))
            if cpu0 is None:  # no /proc: fall back to a wall-clock limit
                ok, reply = _read_frame(fd, time.monotonic() + timeout_s)
            else:
                ok, reply = self._read_within_cpu(fd, cpu0, timeout_s)
        except (OSError, EOFError) as exc:
            return "died", f"extraction worker died: {exc}"
        if not ok:
            return "timeout", None
        return reply  # type: ignore[return-value]

    def _read_within_cpu(self, fd: int, cpu0: float, timeout_s: float) -> tuple[bool, object]:
        """Wait for the reply while the worker has used less than `timeout_s` CPU seconds on it.

        CPU time, not wall time: the decision must not depend on how loaded the machine is (a page that
        needs 1.2 s of CPU times out on every machine, one that needs 0.5 s never does). A wall-clock cap
        of 10x the limit still catches a worker blocked without using CPU.

        The worker runs one thread, so its CPU seconds cannot exceed the wall seconds: for the first
        `timeout_s` of wall time the reply is simply awaited (no /proc reads, no wake-ups: the common case),
        then the CPU used is checked every `_POLL_S`."""
        wall_cap = time.monotonic() + 10 * timeout_s + 5
        ready, _, _ = select.select([fd], [], [], timeout_s)
        if ready:
            return _read_frame(fd, None)
        while True:
            ready, _, _ = select.select([fd], [], [], _POLL_S)
            if ready:
                return _read_frame(fd, None)
            used = _cpu_seconds(self.pid)
            if used is None or used - cpu0 > timeout_s or time.monotonic() > wall_cap:
                return False, None

    def close(self) -> None:
        self._finalizer()


def _handshake(proc: subprocess.Popen, send_fd: int, recv_fd: int, setup: Setup, start_timeout_s: float) -> None:
    """Send a fresh process its engine and options and wait for its "ready"; ExtractorError (and the process
    killed) if it does not come."""
    engine = setup[0]
    try:
        _write_frame(send_fd, setup)
        ok, ready = _read_frame(recv_fd, time.monotonic() + start_timeout_s)
    except (OSError, EOFError) as exc:
        _kill(proc)
        raise ExtractorError(f"extraction worker failed to start ({exc}); is {engine} installed?") from exc
    if not ok:
        _kill(proc)
        raise ExtractorError(
            f"extraction worker not ready after {start_timeout_s} s; "
            f"check that `python -c 'import {engine}'` works in this environment"
        )
    if ready != "ready":
        _kill(proc)
        raise ExtractorError(f"extraction worker refused its configuration: {ready}")


def _spawn_worker(setup: Setup, start_timeout_s: float) -> _Worker:
    """A worker in a fresh interpreter of its own: the fallback when no template can fork one."""
    proc = subprocess.Popen(_script("--worker"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
    _handshake(proc, proc.stdin.fileno(), proc.stdout.fileno(), setup, start_timeout_s)
    return _Worker(proc.pid, proc.stdin.fileno(), proc.stdout.fileno(), functools.partial(_kill, proc))


def _kill(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()


class _TemplateGone(OSError):
    """The template process did not answer (dead, or cannot fork)."""


class _Template:
    """A warmed-up extraction process (a fresh interpreter, started like a worker) that forks workers.

    A new worker then costs a fork (~10 ms of CPU) instead of an interpreter start, the engine's import and
    the first-page warm-up (~0.3-0.5 CPU s), which a timeout otherwise pays again on every restart.
    The caller makes each worker's two pipes and hands the child's ends over the control socket
    (SCM_RIGHTS); the template forks, the child serves them, and the template kills and reaps children on
    request (so their CPU time reaches the caller's RUSAGE_CHILDREN when the template is reaped, and a PID is
    never signalled after it could have been reused). EOF on the control socket ends the template and its
    children; EOF on its request pipe ends a child, so both die with the caller."""

    def __init__(self, setup: Setup, start_timeout_s: float) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                _script("--template", str(theirs.fileno())), stdin=subprocess.DEVNULL, pass_fds=(theirs.fileno(),)
            )
        finally:
            theirs.close()
        self._finalizer = weakref.finalize(self, _stop_template, self.sock, self.proc)
        fd = self.sock.fileno()
        _handshake(self.proc, fd, fd, setup, start_timeout_s)

    def _call(self, message: bytes, fds: list[int] = ()) -> bytes:
        """Send one command line (with `fds` attached) and return the template's one-line reply."""
        try:
            socket.send_fds(self.sock, [message + b"\n"], list(fds))
            reply = b""
            deadline = time.monotonic() + _TEMPLATE_REPLY_S
            while not reply.endswith(b"\n"):
                ready, _, _ = select.select([self.sock], [], [], max(0.0, deadline - time.monotonic()))
                chunk = self.sock.recv(256) if ready else b""
                if not chunk:
                    break
                reply += chunk
        except OSError as exc:
            raise _TemplateGone(f"extraction template gone: {exc}") from exc
        if not reply.endswith(b"\n") or reply.startswith(b"error"):
            raise _TemplateGone(f"extraction template failed: {reply.decode(errors='replace') or 'no reply'}")
        return reply.strip()

    def fork_worker(self) -> _Worker:
        """A new worker forked from the template; _TemplateGone if that cannot be done."""
        req_r, req_w = os.pipe()
        reply_r, reply_w = os.pipe()
        try:
            pid = int(self._call(b"fork", [req_r, reply_w]))
        except _TemplateGone:
            for fd in (req_w, reply_r):
                os.close(fd)
            raise
        finally:
            os.close(req_r)  # the child's ends: the caller keeping them would hide the child's death
            os.close(reply_w)
        # A pidfd names this very process, so the fallback kill (template gone) cannot hit a reused PID.
        try:
            pidfd: int | None = os.pidfd_open(pid)
        except (OSError, AttributeError):  # Linux < 5.3: that kill falls back to the PID
            pidfd = None
        return _Worker(pid, req_w, reply_r, functools.partial(self._stop_worker, pid, pidfd, req_w, reply_r))

    def _stop_worker(self, pid: int, pidfd: int | None, req_w: int, reply_r: int) -> None:
        for fd in (req_w, reply_r):
            os.close(fd)
        try:
            self._call(b"kill %d" % pid)  # the template kills and reaps it
        except _TemplateGone:
            try:  # re-parented: init (or a subreaper) reaps it
                if pidfd is None:
                    os.kill(pid, signal.SIGKILL)
                else:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        finally:
            if pidfd is not None:
                os.close(pidfd)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        self._finalizer()


def _stop_template(sock: socket.socket, proc: subprocess.Popen) -> None:
    sock.close()  # EOF: the template kills and reaps its children, then exits
    try:
        proc.wait(_TEMPLATE_REPLY_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Extractor:
    """Main-text extraction with `engine` (trafilatura or resiliparse) under a per-document size and time limit.

    Thread-safe: calls from several threads are served one at a time by the single worker process
    (create one Extractor per thread for parallelism). Use as a context manager, or call `close()`.
    The time limit counts the worker's CPU seconds on the document (Linux /proc; wall-clock elsewhere),
    so machine load does not change which pages time out.
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_html_bytes: int = DEFAULT_MAX_HTML_BYTES,
        *,
        recycle_after_docs: int = 10_000,
        start_timeout_s: float = 120.0,
        engine: Engine = DEFAULT_ENGINE,
        **engine_options,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"extraction engine must be one of {ENGINES}, got {engine!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_html_bytes <= 0:
            raise ValueError(f"max_html_bytes must be > 0, got {max_html_bytes}")
        self.timeout_s = timeout_s
        self.max_html_bytes = max_html_bytes
        self.recycle_after_docs = recycle_after_docs
        self.start_timeout_s = start_timeout_s
        self.engine = engine
        self.options = {**DEFAULT_OPTIONS[engine], **engine_options}
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._template: _Template | None = None

    def __enter__(self) -> Extractor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker and template processes (a later `extract` starts new ones)."""
        with self._lock:
            self._drop_worker()
            if self._template is not None:
                self._template.close()
                self._template = None

    def extract(self, payload: bytes, content_type: str | None = None, url: str | None = None) -> ExtractionResult:
        """Decode, extract and normalise one HTML payload; never raises for a bad document."""
        start = time.perf_counter()

        def result(text: str | None, decision: str | None, detail: str | None = None) -> ExtractionResult:
            return ExtractionResult(text, decision, time.perf_counter() - start, detail)

        if len(payload) > self.max_html_bytes:
            return result(None, DECISION_TOO_LARGE, f"{len(payload)} bytes > max_html_bytes={self.max_html_bytes}")
        html, how = _decode_html(payload, content_type)
        if html is None:
            return result(None, DECISION_EXTRACT_FAILED, how)
        if not html.strip():
            return result(None, DECISION_EMPTY, "empty payload")

        with self._lock:
            if self._worker is not None and self._worker.n_docs >= self.recycle_after_docs:
                self._drop_worker()  # bounds the memory a long-lived worker accumulates
            if self._worker is None:
                self._worker = self._new_worker()
            status, value = self._worker.request(html, url, self.timeout_s)
            if status in ("timeout", "died"):
                self._drop_worker()

        if status == "timeout":
            return result(None, DECISION_EXTRACT_TIMEOUT, f"no result within {self.timeout_s} s")
        if status != "ok":
            return result(None, DECISION_EXTRACT_FAILED, str(value))
        text = normalise_text(value) if value else ""
        if not text:
            return result(None, DECISION_EMPTY, "no main text found")
        return result(text, None)

    def extract_many(self, items: Iterable[tuple[bytes, str | None, str | None]]) -> list[ExtractionResult]:
        """`extract` over (payload, content_type, url) items, results in input order."""
        return [self.extract(payload, content_type, url) for payload, content_type, url in items]

    def _drop_worker(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def _new_worker(self) -> _Worker:
        """A worker forked from this Extractor's template (started on first use, restarted if it died);
        one in a fresh interpreter if the template cannot fork. ExtractorError if trafilatura cannot start."""
        if self._template is not None and not self._template.alive():
            self._template.close()
            self._template = None
        if self._template is None:
            self._template = _Template((self.engine, self.options), self.start_timeout_s)
        try:
            return self._template.fork_worker()
        except _TemplateGone:
            self._template.close()
            self._template = None
            return _spawn_worker((self.engine, self.options), self.start_timeout_s)


_SHARED: dict[tuple[int, float, int, str], Extractor] = {}
_SHARED_LOCK = threading.Lock()


def shared_extractor(
    timeout_s: float = DEFAULT_TIMEOUT_S, max_html_bytes: int = DEFAULT_MAX_HTML_BYTES, engine: Engine = DEFAULT_ENGINE
) -> Extractor:
    """This thread's long-lived `Extractor` for these limits and engine: partitions curated one after another
    in one process reuse one worker (its start-up, ~0.2 CPU s plus warm-up, is paid once, like the other
    models). Results do not depend on it: every page gets a fresh dedup cache, and the worker is still recycled
    after `recycle_after_docs`. One per thread, so threads never queue on each other's worker."""
    key = (threading.get_ident(), float(timeout_s), int(max_html_bytes), engine)
    with _SHARED_LOCK:
        ex = _SHARED.get(key)
        if ex is None:
            ex = _SHARED[key] = Extractor(timeout_s=timeout_s, max_html_bytes=max_html_bytes, engine=engine)
        return ex


def close_shared_extractors() -> None:
    """Stop every shared extractor's worker (they also stop when the process exits)."""
    with _SHARED_LOCK:
        extractors = list(_SHARED.values())
        _SHARED.clear()
    for ex in extractors:
        ex.close()


# ---------------------------------------------------------------------------------------------------
# Worker process (runs this file as a script; imports nothing from the package)


def _load_trafilatura(options: dict):
    """`extract(html, url) -> text | None` with these trafilatura options, or a message saying what is wrong."""
    import inspect

    import trafilatura
    from trafilatura.deduplication import LRUCache
    from trafilatura.settings import LRU_SIZE

    unknown = sorted(set(options) - set(inspect.signature(trafilatura.extract).parameters))
    if unknown:
        return f"unknown trafilatura.extract options: {unknown}"
    options = dict(options)
    dedup = bool(options.pop("deduplicate", False))

    def extract(html: str, url: str | None) -> str | None:
        # A fresh cache per document: trafilatura's global one would make a page's text depend on
        # the pages the same worker saw before it (non-deterministic across worker counts).
        return trafilatura.extract(html, url=url, deduplicate=LRUCache(maxsize=LRU_SIZE) if dedup else False, **options)

    return extract


def _load_resiliparse(options: dict):
    """`extract(html, url) -> text | None` with these `extract_plain_text` options, or a message saying what is
    wrong. Stateless: a page's text depends on nothing the worker saw before."""
    import inspect

    from resiliparse.extract.html2text import extract_plain_text

    known = set(inspect.signature(extract_plain_text).parameters) - {"html"}
    unknown = sorted(set(options) - known)
    if unknown:
        return f"unknown resiliparse extract_plain_text options: {unknown}"

    def extract(html: str, url: str | None) -> str | None:
        return extract_plain_text(html, **options)

    return extract


_LOADERS = {"trafilatura": _load_trafilatura, "resiliparse": _load_resiliparse}


def _serve(in_fd: int, out_fd: int, extract) -> None:
    """Answer (html, url) requests until EOF."""
    while True:
        try:
            _, (html, url) = _read_frame(in_fd, None)
        except EOFError:
            return
        try:
            reply: tuple[str, object] = ("ok", extract(html, url))
        except Exception as exc:  # noqa: BLE001 - any library error is a per-document decision
            reply = ("error", f"{type(exc).__name__}: {exc}"[:500])
        _write_frame(out_fd, reply)


def _configure(in_fd: int, out_fd: int):
    """Read the engine and its options, load it and answer why not if it cannot be: (engine, extract function),
    or None."""
    logging.disable(logging.WARNING)  # trafilatura logs every discarded page; decisions carry that
    _, (engine, options) = _read_frame(in_fd, None)
    extract = _LOADERS[engine](options)
    if isinstance(extract, str):
        _write_frame(out_fd, extract)
        return None
    return engine, extract


def _worker_main() -> None:
    # The protocol owns the real stdout; anything a library prints goes to stderr instead.
    out_fd = os.dup(1)
    os.dup2(2, 1)
    in_fd = sys.stdin.fileno()
    configured = _configure(in_fd, out_fd)
    if configured is not None:
        _write_frame(out_fd, "ready")
        _serve(in_fd, out_fd, configured[1])


def _warm_up(engine: str, extract) -> None:
    """Pay the engine's lazy first-use costs once, in the template, so no forked worker pays them on a page
    (where they count against that page's CPU limit)."""
    extract(_WARM_UP_HTML, None)
    if engine == "trafilatura":
        from trafilatura import external

        # justext's fallback builds its all-languages stoplist on the first page it rescues (~0.2 CPU s).
        if external.JT_STOPLIST is None:
            external.jt_stoplist_init()


def _template_main(ctl_fd: int) -> None:
    os.dup2(2, 1)  # nothing a library prints may reach the caller's stdout
    sock = socket.socket(fileno=ctl_fd)
    configured = _configure(ctl_fd, ctl_fd)
    if configured is None:
        return
    engine, extract = configured
    _warm_up(engine, extract)
    import gc

    gc.freeze()  # the warmed-up heap stays shared with the children (no copy-on-write from GC passes)
    _write_frame(ctl_fd, "ready")
    children: set[int] = set()
    while True:
        message, fds = _recv_command(sock)
        if message is None:  # the caller is gone or closed us
            break
        if message == b"fork":
            try:
                pid = os.fork()
            except OSError as exc:
                reply = f"error {exc}".encode()
            else:
                if pid == 0:  # the worker: serve the caller's pipes, nothing else
                    sock.close()
                    try:
                        _serve(fds[0], fds[1], extract)
                    finally:
                        os._exit(0)
                children.add(pid)
                reply = b"%d" % pid
            for fd in fds:
                os.close(fd)
        else:  # b"kill <pid>"
            pid = int(message.split()[1])
            if pid in children:
                children.discard(pid)
                _kill_and_reap(pid)
            reply = b"ok"
        sock.sendall(reply + b"\n")
    for pid in children:
        _kill_and_reap(pid)


def _recv_command(sock: socket.socket) -> tuple[bytes | None, list[int]]:
    """One command line and the fds sent with it; (None, []) at EOF."""
    message, all_fds = b"", []
    while not message.endswith(b"\n"):
        chunk, fds, _, _ = socket.recv_fds(sock, 256, 2)
        if not chunk:
            for fd in all_fds:
                os.close(fd)
            return None, []
        message += chunk
        all_fds += fds
    return message.strip(), all_fds


def _kill_and_reap(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    _worker_main()
elif __name__ == "__main__" and sys.argv[1:2] == ["--template"]:
    _template_main(int(sys.argv[2]))
