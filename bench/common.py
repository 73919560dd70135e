"""What several benches share: the failure type, the sample crawl's WARC files, peak memory, the run wrapper,
competitors' own virtualenvs."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

WARC_GLOB = "crawl-data/*/segments/*/warc/*.warc.gz"
BENCH_OUT = Path(__file__).resolve().parent / "out"
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TRAFILATURA_EVAL_TAR = SHARED_DATA / "extraction_gold" / "trafilatura_eval_e90b0ef5.tar.xz"
AEB_IN_DATA = Path("extraction_gold") / "scrapinghub_aeb_4a3bc979.tar"  # under a --data folder
AEB_TAR = SHARED_DATA / AEB_IN_DATA
PYDOCS_TAR = SHARED_DATA / "corpus" / "python3.11-doc_3.11.2-6+deb12u9_sources_rst.tar.xz"
AEB_PREFIX = "article-extraction-benchmark/"


class BenchFailure(Exception):
    """Something the bench measures did not work; the message says what."""


BENCH_TIMEOUT_S = 1.0  # per-page extraction limit on both sides of a comparison: datatrove's published default


def warc_paths(root: Path) -> list[Path]:
    """Every `.warc.gz` under a Common-Crawl-layout root, sorted."""
    paths = sorted(root.glob(WARC_GLOB))
    if not paths:
        raise BenchFailure(f"no {WARC_GLOB} under {root}")
    return paths


def clean_env(**extra: str) -> dict:
    """The environment for a competitor's venv: nothing of ours on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


def ensure_venv(venv: Path, requirements: Sequence[str], label: str) -> tuple[Path, float | None]:
    """A competitor's own venv with exactly `requirements`, created from the registry once and reused while its
    marker file matches: (its python, install seconds or None when reused). BenchFailure when pip fails."""
    python = venv / "bin" / "python"
    marker = venv / ".tokenlake-bench-requirements"
    if python.exists() and marker.exists() and marker.read_text() == "\n".join(requirements):
        return python, None
    print(f"creating {label}'s venv at {venv} (from the package registry, once) ...", flush=True)
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    base = shutil.which("python3.11") or getattr(sys, "_base_executable", sys.executable)
    t0 = time.perf_counter()
    for cmd in ([base, "-m", "venv", str(venv)], [str(python), "-m", "pip", "install", "--quiet", *requirements]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=clean_env())
        if proc.returncode != 0:
            raise BenchFailure(
                f"{label} did not install: `{' '.join(cmd)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}"
            )
    marker.write_text("\n".join(requirements))
    return python, time.perf_counter() - t0


def make_copies(src_root: Path, dst_root: Path, copies: int) -> int:
    """Mirror `src_root` with each WARC file replaced by `copies` concatenated copies (a valid .warc.gz);
    returns the bytes written."""
    total = 0
    for path in warc_paths(src_root):
        dst = dst_root / path.relative_to(src_root)
        dst.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        with open(dst, "wb") as fh:
            for _ in range(copies):
                fh.write(data)
        total += len(data) * copies
    return total


def write_warc(out: Path, pages: Sequence[tuple[str, bytes, str]]) -> Path:
    """(uri, body, content type) pages as `200 OK` response records of one WARC, unless `out` exists already."""
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for uri, body, ctype in pages:
            http = StatusAndHeaders("200 OK", [("Content-Type", ctype)], protocol="HTTP/1.1")
            writer.write_record(writer.create_warc_record(uri, "response", payload=io.BytesIO(body), http_headers=http))
    tmp.rename(out)
    return out


def trafilatura_eval_pages(limit: int) -> list[tuple[str, Path]] | None:
    """(url as the set names it, HTML file) of the first `limit` pages, in URL order, of trafilatura's
    evaluation set (../shared/data, unpacked once under bench/out); None, said on stderr, without the set."""
    if not TRAFILATURA_EVAL_TAR.exists():
        print(f"missing {TRAFILATURA_EVAL_TAR} (../shared/data): trafilatura's pages skipped", file=sys.stderr)
        return None
    root = BENCH_OUT / "trafilatura_eval"
    if not root.exists():
        BENCH_OUT.mkdir(parents=True, exist_ok=True)
        subprocess.run(["tar", "xJf", str(TRAFILATURA_EVAL_TAR), "-C", str(BENCH_OUT)], check=True)
    meta = json.loads((root / "tests" / "evaldata.json").read_text())
    pages = []
    for url in sorted(meta)[:limit]:
        where = (root / "tests" / folder / meta[url]["file"] for folder in ("eval", "cache"))
        pages.append((url, next(p for p in where if p.exists())))
    return pages


def load_aeb(tar_path: Path) -> list[tuple[str, bytes, str, str]]:
    """ScrapingHub's Article Extraction Benchmark: [(id, html bytes, url, articleBody)] sorted by id."""
    with tarfile.open(tar_path) as tar:
        truth = json.load(tar.extractfile(AEB_PREFIX + "ground-truth.json"))
        pages = []
        for page_id in sorted(truth):
            member = tar.extractfile(f"{AEB_PREFIX}html/{page_id}.html.gz")
            pages.append(
                (page_id, gzip.decompress(member.read()), truth[page_id]["url"], truth[page_id]["articleBody"])
            )
    return pages


def vm_hwm_kib() -> int:
    """This process's peak resident set (VmHWM from /proc/self/status), KiB; 0 where unavailable."""
    status = Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def run_reported(name: str, run: Callable[[Path], int], missing_input_exit: int | None = None) -> int:
    """Run `run(workdir)` in a fresh temp dir and return its exit code: a BenchFailure prints FAILED and exits 1,
    a missing input file exits `missing_input_exit` when given; the elapsed time is printed either way."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"tokenlake-bench-{name}-", ignore_cleanup_errors=True) as tmp:
        try:
            return run(Path(tmp))
        except FileNotFoundError as exc:
            if missing_input_exit is None:
                raise
            print(f"\nMISSING INPUT: {exc}", file=sys.stderr)
            return missing_input_exit
        except BenchFailure as exc:
            print(f"\nFAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            print(f"\n(bench took {time.perf_counter() - started:.0f} s)")
