"""Reading row groups of token files: local paths, any pyiceberg FileIO location, or `s3://` objects through a
node-local cache.

One row group is one unit of I/O: its column chunks are fetched with ONE ranged read (the footer of each file
is read once per process and says where they lie), decoded from memory, and verified document by document
(`loader.sources.decode_row_group`). For `s3://` objects (pyarrow's `S3FileSystem`, connect and request
timeouts from `StorageConfig`) a failed read is retried at most `max_attempts` times with jittered
exponential backoff, and every retry is counted.

The node-local cache (`NodeCache`) keeps the fetched bytes of row groups under a byte budget, least recently
used out first. A file enters the cache under a temporary name and is renamed into place (a reader never
sees half a file); a cached row group is verified like a fetched one before it is served, and one that fails
(torn, flipped bits, truncated) is deleted, fetched again and counted (`corrupt_refetched`), never served.
A fetched row group that fails verification is an error naming the run view, the object and the document:
the store itself holds bad bytes, and nothing is skipped or substituted.

Several processes on a node may share one cache directory (DataLoader workers, ranks): entries are
immutable and written atomically, and each process keeps the directory under budget as it writes.
"""

from __future__ import annotations

import hashlib
import os
import random
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from loader.errors import ChecksumMismatch, LoaderError, MissingDocument, UnsupportedLayout
from loader.metrics import percentile

TOKEN_COLUMNS = ("tokens",)  # the checksums of the run view vouch for them; ids and dtypes come from the view
FOOTER_ENTRY = 2**32  # the node-cache entry of an object's footer (row groups are numbered below it)
_MAGIC = b"TLRG1"  # cache file: magic, 8-byte offset of the range in the object, then the bytes
_VERIFY_ERRORS = (ChecksumMismatch, MissingDocument, UnsupportedLayout, pa.ArrowException, OSError, ValueError)


class StorageError(LoaderError):
    """A row group could not be read from storage after every allowed attempt; names the object."""


@dataclass(frozen=True)
class StorageConfig:
    """How token objects are read: timeouts and retries for object storage, and the node-local cache.

    `cache_dir` None: no cache (remote row groups are fetched each time they are needed). `cache_bytes` is the
    cache's byte budget on disk; `memory_bytes` bounds the decoded row groups each process keeps in memory.
    """

    cache_dir: str | None = None
    cache_bytes: int = 8 << 30
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 30.0
    max_attempts: int = 5
    backoff_base_s: float = 0.05
    backoff_max_s: float = 2.0
    cache_local: bool = False  # also cache row groups of local files (benchmarks, tests)
    readahead_bytes: int = 256 << 20  # fetched ahead of the consumer (capped at half the cache budget)
    readahead_threads: int = 4

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.cache_bytes < 1:
            raise ValueError(f"cache_bytes must be >= 1, got {self.cache_bytes}")


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full-jitter exponential backoff before retry `attempt` (1, 2, ...): uniform in [0, min(cap, base*2^a)]."""
    return rng.uniform(0.0, min(cap, base * (2**attempt)))


class _RangeFile:
    """A read-only file over one byte range of an object, at its original offsets (what pyarrow's Parquet
    reader needs to decode a row group with the object's footer)."""

    def __init__(self, data: bytes | memoryview, offset: int, size: int) -> None:
        self.data, self.offset, self.size_, self.pos, self.closed = memoryview(data), offset, size, 0, False

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = pos if whence == 0 else (self.pos + pos if whence == 1 else self.size_ + pos)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def size(self) -> int:
        return self.size_

    def read(self, n: int = -1) -> bytes:
        a = self.pos - self.offset
        if a < 0 or (n > 0 and a + n > len(self.data)):
            raise OSError(f"read of [{self.pos}, +{n}) outside the fetched range at {self.offset}")
        b = len(self.data) if n < 0 else a + n
        self.pos += b - a
        return bytes(self.data[a:b])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class NodeCache:
    """Row-group bytes on local disk under a byte budget (LRU by access time), written atomically."""

    def __init__(self, directory: str | os.PathLike, budget_bytes: int) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.budget = int(budget_bytes)
        self._lock = threading.Lock()
        self._sizes: dict[Path, int] | None = None

    def path(self, obj: str, row_group: int) -> Path:
        name = hashlib.sha256(f"{obj}\0{row_group}".encode()).hexdigest()[:40]
        return self.dir / name[:2] / (f"{name}.ft" if row_group == FOOTER_ENTRY else f"{name}.rg")

    def get(self, obj: str, row_group: int) -> tuple[int, bytes] | None:
        """(offset, bytes) of a cached row group, or None; a malformed file counts as absent (and is removed)."""
        p = self.path(obj, row_group)
        try:
            raw = p.read_bytes()
        except FileNotFoundError:
            return None
        if len(raw) < len(_MAGIC) + 8 or not raw.startswith(_MAGIC):
            self.remove(p)
            return None
        with _suppress_os():
            os.utime(p)  # LRU by access time
        (offset,) = struct.unpack_from("<Q", raw, len(_MAGIC))
        return offset, raw[len(_MAGIC) + 8 :]

    def put(self, obj: str, row_group: int, offset: int, data: bytes) -> None:
        """Store atomically (temp file, fsync-free rename), then evict least recently used files over budget."""
        p = self.path(obj, row_group)
        p.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._evict(keep=p, room=len(data) + len(_MAGIC) + 8)  # make room first: never over budget here
        tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(_MAGIC + struct.pack("<Q", offset))
            fh.write(data)
        os.replace(tmp, p)
        with self._lock:
            if self._sizes is not None:
                self._sizes[p] = p.stat().st_size
            self._evict(keep=p)

    def remove(self, p: Path) -> None:
        with _suppress_os():
            p.unlink()
        with self._lock:
            if self._sizes is not None:
                self._sizes.pop(p, None)

    def _scan(self) -> list[tuple[float, int, Path]]:
        out = []
        for p in [*self.dir.glob("*/*.rg"), *self.dir.glob("*/*.ft")]:
            with _suppress_os():
                st = p.stat()
                out.append((st.st_atime if st.st_atime > st.st_mtime else st.st_mtime, st.st_size, p))
        return out

    def _evict(self, keep: Path, room: int = 0) -> None:
        entries = self._scan()  # other processes write here too: the directory is the truth
        total = sum(e[1] for e in entries) + room
        if total <= self.budget:
            return
        for _, size, p in sorted(entries):
            if total <= self.budget:
                break
            if p == keep:
                continue
            with _suppress_os():
                p.unlink()
                total -= size

    def bytes_used(self) -> int:
        return sum(e[1] for e in self._scan())


class _suppress_os:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type, exc, tb) -> bool:
        return exc_type is not None and issubclass(exc_type, OSError)


def _s3_filesystem(props: Mapping[str, str], config: StorageConfig):
    from pyarrow import fs

    endpoint = props.get("s3.endpoint")
    scheme, override = None, None
    if endpoint:
        scheme, _, override = endpoint.partition("://")
        if not override:
            scheme, override = "https", endpoint
    return fs.S3FileSystem(
        access_key=props.get("s3.access-key-id"),
        secret_key=props.get("s3.secret-access-key"),
        session_token=props.get("s3.session-token"),
        region=props.get("s3.region") or "us-east-1",
        endpoint_override=override,
        scheme=scheme or "https",
        connect_timeout=config.connect_timeout_s,
        request_timeout=config.request_timeout_s,
        retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1),  # retries are ours: bounded, counted
        force_virtual_addressing=props.get("s3.force-virtual-addressing", "false").lower() == "true",
    )


# footers this process already parsed elsewhere (the loader's layout pass reads every token file's footer):
# path -> (FileMetaData, object size); used for objects that do not go through the node cache
_KNOWN_FOOTERS: dict[str, tuple[pq.FileMetaData, int]] = {}
_KNOWN_FOOTERS_MAX = 4096


def remember_footer(path: str, metadata: pq.FileMetaData, size: int) -> None:
    """Record an immutable object's parsed footer, so this process's row-group reads do not parse it again."""
    if len(_KNOWN_FOOTERS) >= _KNOWN_FOOTERS_MAX:
        _KNOWN_FOOTERS.clear()
    _KNOWN_FOOTERS[path] = (metadata, int(size))


class RowGroupReader:
    """Fetches, caches and verifies row groups for one process; thread-safe (prefetch threads share it)."""

    def __init__(self, io_properties: Mapping[str, str] | None = None, config: StorageConfig | None = None) -> None:
        self.props = dict(io_properties or {})
        self.config = config or StorageConfig()
        self.cache = NodeCache(self.config.cache_dir, self.config.cache_bytes) if self.config.cache_dir else None
        self._lock = threading.Lock()
        self._fs: Any = None
        self._files: dict[str, Any] = {}
        self._parquet: dict[str, pq.ParquetFile] = {}
        self._footers: dict[str, tuple[pq.FileMetaData, int]] = {}
        self._footer_locks: dict[str, threading.Lock] = {}
        self._rng = random.Random(os.getpid())
        self._latencies: list[float] = []
        self.stats = {
            "fetches": 0,
            "fetch_bytes": 0,
            "fetch_seconds": 0.0,
            "retries": 0,
            "cache_hits": 0,
            "cache_misses": 0,
            "corrupt_refetched": 0,
            "decode_seconds": 0.0,
            "footer_reads": 0,
        }

    # -- objects ------------------------------------------------------------------------------------------

    def _remote(self, path: str) -> bool:
        return path.startswith(("s3://", "s3a://", "s3n://"))

    def _open(self, path: str):
        f = self._files.get(path)
        if f is not None:
            return f
        if self._remote(path):
            if self._fs is None:
                self._fs = _s3_filesystem(self.props, self.config)
            f = self._fs.open_input_file(path.split("://", 1)[1])
        elif "://" in path and not path.startswith("file://"):
            from pyiceberg.io import load_file_io

            f = pa.PythonFile(load_file_io(self.props, location=path).new_input(path).open(), mode="r")
        else:
            f = pa.OSFile(path.removeprefix("file://"), "rb")
        self._files[path] = f
        return f

    def _retry(self, path: str, what: str, op: Callable[[Any], Any]) -> Any:
        """`op(open file)` retried with jittered backoff on I/O errors (remote objects: `max_attempts`)."""
        attempts = self.config.max_attempts if self._remote(path) else 1
        for attempt in range(1, attempts + 1):
            try:
                with self._lock:
                    f = self._open(path)
                return op(f)
            except (OSError, pa.ArrowException) as exc:
                with self._lock:
                    self._files.pop(path, None)
                    self._parquet.pop(path, None)
                if attempt == attempts:
                    raise StorageError(f"could not {what} of {path} after {attempts} attempts: {exc}") from exc
                with self._lock:
                    self.stats["retries"] += 1
                    delay = backoff_seconds(attempt, self.config.backoff_base_s, self.config.backoff_max_s, self._rng)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _read_at(self, path: str, offset: int, n: int) -> bytes:
        """n bytes at offset (one ranged read), retried."""

        def op(f) -> bytes:
            data = f.read_at(n, offset)
            if len(data) != n:
                raise OSError(f"short read: {len(data)} of {n} bytes")
            return data.to_pybytes() if hasattr(data, "to_pybytes") else bytes(data)

        return self._retry(path, f"read {n} bytes at {offset}", op)

    def footer(self, path: str) -> tuple[pq.FileMetaData, int]:
        """(Parquet footer, object size), read once per process per object; for a cached object also kept in the
        node cache (with its sha256), so a warm node reads no footer from the store either."""
        got = self._footers.get(path)
        if got is not None:
            return got
        with self._lock:
            lock = self._footer_locks.setdefault(path, threading.Lock())
        with lock:  # one read per object even when read-ahead threads and the consumer ask at once
            got = self._footers.get(path)
            return got if got is not None else self._read_footer(path)

    def _read_footer(self, path: str) -> tuple[pq.FileMetaData, int]:
        known = None if self._caches(path) else _KNOWN_FOOTERS.get(path)
        if known is not None:
            with self._lock:
                self._footers[path] = known
            return known
        md = size = None
        cached = self.cache.get(path, FOOTER_ENTRY) if self._caches(path) else None
        if cached is not None:
            size, blob = cached
            digest, raw = blob[:32], blob[32:]
            try:
                if hashlib.sha256(raw).digest() != digest:
                    raise ValueError("cached footer does not match its digest")
                md = pq.read_metadata(pa.BufferReader(raw))
            except (ValueError, OSError, pa.ArrowException):
                self.cache.remove(self.cache.path(path, FOOTER_ENTRY))
                md = None
        if md is None:
            size = self._retry(path, "read the size", lambda f: f.size())
            tail = self._read_at(path, size - 8, 8)
            (length,) = struct.unpack("<I", tail[:4])
            raw = self._read_at(path, size - 8 - length, length + 8)
            md = pq.read_metadata(pa.BufferReader(raw))
            with self._lock:
                self.stats["footer_reads"] += 1
            if self._caches(path):
                self.cache.put(path, FOOTER_ENTRY, size, hashlib.sha256(raw).digest() + raw)
        with self._lock:
            self._footers[path] = (md, size)
        return md, size

    def row_group_range(self, path: str, row_group: int, columns=TOKEN_COLUMNS) -> tuple[int, int]:
        """[start, end) bytes of the row group's chunks of `columns` in the object."""
        md, _ = self.footer(path)
        rg = md.row_group(row_group)
        lo, hi = None, 0
        for c in range(rg.num_columns):
            col = rg.column(c)
            if col.path_in_schema not in columns:
                continue
            start = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset is not None:
                start = min(start, col.dictionary_page_offset)
            lo = start if lo is None else min(lo, start)
            hi = max(hi, start + col.total_compressed_size)
        if lo is None:
            raise UnsupportedLayout(f"{path} row group {row_group} has none of the columns {list(columns)}")
        return lo, hi

    def fetch(self, path: str, row_group: int) -> tuple[int, bytes]:
        """(offset, bytes) of a row group's token columns: one ranged read, timed and counted."""
        lo, hi = self.row_group_range(path, row_group)
        t0 = time.perf_counter()
        data = self._read_at(path, lo, hi - lo)
        seconds = time.perf_counter() - t0
        with self._lock:
            self.stats["fetches"] += 1
            self.stats["fetch_bytes"] += len(data)
            self.stats["fetch_seconds"] += seconds
            if len(self._latencies) < 4096:
                self._latencies.append(seconds)
            else:
                self._latencies[self._rng.randrange(4096)] = seconds
        return lo, data

    def decode(self, path: str, row_group: int, offset: int, data: bytes) -> pa.Table:
        md, size = self.footer(path)
        t0 = time.perf_counter()
        pf = pq.ParquetFile(pa.PythonFile(_RangeFile(data, offset, size), mode="r"), metadata=md, pre_buffer=False)
        table = pf.read_row_group(row_group, columns=list(TOKEN_COLUMNS), use_threads=False)
        with self._lock:
            self.stats["decode_seconds"] += time.perf_counter() - t0
        return table

    def _read_local(self, path: str, row_group: int) -> pa.Table:
        """A local (or FileIO) row group read in place by pyarrow, timed like a fetch."""
        md, _ = self.footer(path)
        t0 = time.perf_counter()
        with self._lock:
            pf = self._parquet.get(path)
            if pf is None:
                pf = self._parquet[path] = pq.ParquetFile(self._open(path), metadata=md, pre_buffer=False)
            # one row group of one column: pyarrow's thread pool costs more than it saves (3x on 2 cores)
            table = pf.read_row_group(row_group, columns=list(TOKEN_COLUMNS), use_threads=False)
        seconds = time.perf_counter() - t0
        with self._lock:
            self.stats["fetches"] += 1
            self.stats["fetch_seconds"] += seconds
            if len(self._latencies) < 4096:
                self._latencies.append(seconds)
        return table

    def _caches(self, path: str) -> bool:
        return self.cache is not None and (self._remote(path) or self.config.cache_local)

    def read_verified(self, path: str, row_group: int, verify: Callable[[pa.Table, str], Any]) -> Any:
        """`verify(table, where)` over the row group: from the node cache when it holds a good copy, else
        fetched (and cached). A cached copy that fails verification is removed, counted and fetched again;
        a fetched copy that fails raises (the object in the store is bad)."""
        where = f"row group {row_group} of {path}"
        if not self._remote(path) and not self._caches(path):
            return verify(self._read_local(path, row_group), where)
        if self._caches(path):
            hit = self.cache.get(path, row_group)
            if hit is not None:
                try:
                    out = verify(self.decode(path, row_group, *hit), where + " (node cache)")
                    with self._lock:
                        self.stats["cache_hits"] += 1
                    if hasattr(out, "from_cache"):
                        out.from_cache = True  # its documents are checked as read: one that fails is refetched
                    return out
                except _VERIFY_ERRORS:
                    self.cache.remove(self.cache.path(path, row_group))
                    with self._lock:
                        self.stats["corrupt_refetched"] += 1
            with self._lock:
                self.stats["cache_misses"] += 1
        offset, data = self.fetch(path, row_group)
        out = verify(self.decode(path, row_group, offset, data), where)
        if self._caches(path):
            self.cache.put(path, row_group, offset, data)
        return out

    def refetch(self, path: str, row_group: int, verify: Callable[[pa.Table, str], Any]) -> Any:
        """A row group served from the node cache turned out corrupt (a document failed its checksum): drop the
        cached copy, count it as a corrupt re-fetch (a miss, not a hit), fetch it from the store again."""
        if self.cache is not None:
            self.cache.remove(self.cache.path(path, row_group))
        with self._lock:
            self.stats["corrupt_refetched"] += 1
            self.stats["cache_hits"] -= 1
            self.stats["cache_misses"] += 1
        offset, data = self.fetch(path, row_group)
        out = verify(self.decode(path, row_group, offset, data), f"row group {row_group} of {path}")
        if self._caches(path):
            self.cache.put(path, row_group, offset, data)
        return out

    def prefetch(self, path: str, row_group: int) -> int:
        """Bring a row group into the node cache without decoding it; returns the bytes fetched (0: cached)."""
        if not self._caches(path):
            return 0
        self.footer(path)  # a warm cache still needs the footer to decode: read it here, not on the hot path
        if self.cache.path(path, row_group).exists():
            return 0
        offset, data = self.fetch(path, row_group)
        self.cache.put(path, row_group, offset, data)
        return len(data)

    def summary(self, disk: bool = True) -> dict:
        """Counters plus fetch latency p50/p95/p99 (seconds) and (`disk`) the cache's bytes on disk."""
        with self._lock:
            s = dict(self.stats)
            lat = sorted(self._latencies)
        hits, misses = s["cache_hits"], s["cache_misses"]
        s["cache_hit_rate"] = hits / (hits + misses) if hits + misses else None
        s["fetch_latency_p50"] = percentile(lat, 50)
        s["fetch_latency_p95"] = percentile(lat, 95)
        s["fetch_latency_p99"] = percentile(lat, 99)
        if disk:
            s["cache_bytes"] = self.cache.bytes_used() if self.cache is not None else 0
        return s


class Readahead:
    """Fetches the row groups a loader will need into the node cache before it needs them, in the loader's own
    deterministic future order, with at most `max_bytes` fetched ahead of the consumer (plus the error of its
    estimate of the reads in flight: the largest row group seen so far) and `threads` reads in flight (object
    stores reward concurrency; a slow store is hidden up to that depth).

    `plan` yields (step, [row-group keys]) in the order the consumer will ask for them; `fetch(key)` brings one
    into the cache and returns the bytes it fetched (0 when it was cached already). The consumer calls
    `advance(step)` as it starts each step, which releases what earlier steps held of the byte budget.
    """

    def __init__(
        self,
        plan,
        fetch: Callable[[int], int],
        max_bytes: int,
        threads: int = 4,
        name: str = "tokenlake-readahead",
        max_steps: int = 64,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if max_bytes < 1 or threads < 1:
            raise ValueError(f"max_bytes and threads must be >= 1, got {max_bytes}, {threads}")
        self.max_bytes, self.threads, self.max_steps = int(max_bytes), int(threads), int(max_steps)
        self._fetch = fetch
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ahead: dict[int, int] = {}  # step -> bytes fetched for it, not yet consumed
        self._in_flight = 0
        self._largest = 0
        self._current = -1
        self.ahead_bytes = 0
        self.peak_ahead_bytes = 0
        self.fetched = 0
        self.error: BaseException | None = None
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._thread = threading.Thread(target=self._run, args=(iter(plan),), name=name, daemon=True)
        self._thread.start()

    def _run(self, plan) -> None:
        seen: dict[int, int] = {}
        try:
            for step, keys in plan:
                with self._cond:  # never more than max_steps ahead, even when everything is cached already
                    while not self._stop.is_set() and step > self._current + self.max_steps:
                        self._cond.wait(0.05)
                for key in keys:
                    if self._stop.is_set():
                        return
                    if key in seen and seen[key] >= self._current:  # already fetched for a step still ahead
                        continue
                    seen[key] = step
                    with self._cond:
                        while not self._stop.is_set() and (
                            self._in_flight >= self.threads
                            or (self._largest == 0 and self._in_flight > 0)  # size unknown: one at a time
                            or self.ahead_bytes + (self._in_flight + 1) * self._largest > self.max_bytes
                        ):
                            self._cond.wait(0.05)
                        if self._stop.is_set():
                            return
                        self._in_flight += 1
                    self._pool.submit(self._one, step, key)
                if len(seen) > 65536:  # forget what the consumer has passed (a later epoch fetches it again)
                    seen = {k: s for k, s in seen.items() if s >= self._current}
        except BaseException as exc:  # noqa: BLE001 - reported to the consumer through `error`
            self.error = exc

    def _one(self, step: int, key: int) -> None:
        try:
            n = self._fetch(key) if not self._stop.is_set() else 0
        except BaseException as exc:  # noqa: BLE001 - the consumer's own read raises the real error
            n = 0
            self.error = exc
        with self._cond:
            self._in_flight -= 1
            self._largest = max(self._largest, n)
            if step >= self._current and n:
                self._ahead[step] = self._ahead.get(step, 0) + n
                self.ahead_bytes += n
                self.peak_ahead_bytes = max(self.peak_ahead_bytes, self.ahead_bytes)
            self.fetched += 1 if n else 0
            self._cond.notify_all()

    def advance(self, step: int) -> None:
        """The consumer starts `step`: bytes fetched for earlier steps no longer count as ahead."""
        with self._cond:
            self._current = step
            for s in [s for s in self._ahead if s < step]:
                self.ahead_bytes -= self._ahead.pop(s)
            self._cond.notify_all()

    def depth(self) -> int:
        """Row-group reads in flight plus steps with fetched row groups waiting."""
        with self._cond:
            return self._in_flight + len(self._ahead)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=True)  # reads in flight end within the request timeout
