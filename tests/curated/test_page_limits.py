"""Pathological pages at scale: a 50 MB HTML page and a page of 100,000 nested tags go through the raw ingest
and the curation asset (real Dagster, real Iceberg, real trafilatura worker) next to a real page. Each gets a
row with a decision reason within the per-document limits (`max_html_bytes` before any decoding, and the
worker's CPU-second limit `extract_timeout_s`), and the curation process stays within a memory bound measured
against the same partition without them, in the same test.

Each step runs in its own process (this file as a script) so its peak RSS (`ru_maxrss`) is its own.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CC_FILE = next((REPO / "data/sample_crawl/crawl-data/CC-MAIN-2020-34").rglob("*.warc.gz"))
KEY = "LIMITS/seg"
BIG_BYTES = 50_000_000
NESTED_TAGS = 100_000
# Memory the pathological pages may add to the curation process's peak, over the same partition without
# them: a 50 MB payload is held a few times (Arrow batch, Python bytes, row); a bound that still catches
# an extraction of it (trafilatura's tree of a 50 MB page is several GB) or a copy per row of the batch.
EXTRA_RSS_BOUND_MB = 400
WORKER_RSS_BOUND_MB = 1024

pytestmark = pytest.mark.slow  # four processes, two curations: ~40 s on 2 cores


def pages(pathological: bool) -> dict[str, bytes]:
    """A real page from the sample crawl, plus (when `pathological`) the 50 MB page and the nested one."""
    real = gzip.decompress(CC_FILE.read_bytes())
    start = real.index(b"<html")
    out = {"http://example.org/real": real[start : real.index(b"</html>", start) + 7]}
    if pathological:
        para = b"<p>" + b"a sentence of ordinary words that goes on for a while. " * 20 + b"</p>\n"
        body = para * (BIG_BYTES // len(para) + 1)
        out["http://example.org/50mb"] = b"<html><body>" + body[:BIG_BYTES] + b"</body></html>"
        out["http://example.org/nested"] = (
            b"<html><body>" + b"<div>" * NESTED_TAGS + b"deep text" + b"</div>" * NESTED_TAGS + b"</body></html>"
        )
    return out


def step(name: str, root: Path) -> None:
    """In a fresh process: run job `name` on the partition as `make demo` does; print time and peak RSS."""
    from orchestration.instance import prepare_dagster_home

    prepare_dagster_home()
    import dagster as dg

    from orchestration.definitions import build_defs
    from orchestration.demo import run_job

    defs = build_defs(str(root))
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions("crawl_segments", [KEY])
        t0 = time.perf_counter()
        run_job(defs, instance, name, KEY)
        seconds = time.perf_counter() - t0
    from assets.curated.extract import close_shared_extractors

    close_shared_extractors()  # the extraction worker outlives the run (shared per process): reap it to count it
    peak = {
        "self_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }
    print("RESULT " + json.dumps({"seconds": seconds, **peak}))


def run_step(name: str, root: Path, home: Path, lm: str) -> dict:
    env = {**os.environ, "TOKENLAKE_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"), "TOKENLAKE_LM_PATH": lm}
    env.pop("TOKENLAKE_CATALOG", None)
    out = subprocess.run(
        [sys.executable, __file__, name, str(root)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def build(tmp: Path, pathological: bool, lm: str) -> tuple[Path, dict, dict]:
    # not at the top: this file also runs as a script (`step`), before the repository is on sys.path
    from tests.curated.warc_records import response_record

    root, home = tmp / "crawl", tmp / "home"
    warc = root / "crawl-data" / "LIMITS" / "segments" / "seg" / "warc" / "limits.warc.gz"
    warc.parent.mkdir(parents=True)
    warc.write_bytes(b"".join(response_record(url, body) for url, body in pages(pathological).items()))
    return home, run_step("raw_ingest", root, home, lm), run_step("curate", root, home, lm)


def test_50mb_page_and_100k_nested_tags_get_a_reason_within_time_and_memory_bounds(
    tmp_path, monkeypatch, reference_lm_file
):
    from assets.curated.pipeline import CurateParams
    from iceberg_catalog import Lakehouse
    from iceberg_catalog.schemas import CURATED_DOCUMENTS

    _, _, base = build(tmp_path / "baseline", False, reference_lm_file)
    home, ingest, hostile = build(tmp_path / "hostile", True, reference_lm_file)
    monkeypatch.setenv("TOKENLAKE_HOME", str(home))
    docs = {r["url"]: r for r in Lakehouse().scan(CURATED_DOCUMENTS).to_pylist()}
    params = CurateParams()
    wall_cap = 10 * params.extract_timeout_s + 5  # the worker is killed past this even when starved of CPU
    extra = hostile["self_mb"] - base["self_mb"]
    print(
        f"\npage limits: raw_ingest {ingest['seconds']:.1f} s peak {ingest['self_mb']:.0f} MB; curate baseline "
        f"{base['seconds']:.1f} s peak {base['self_mb']:.0f} MB (worker {base['children_mb']:.0f} MB), with the "
        f"pages {hostile['seconds']:.1f} s peak {hostile['self_mb']:.0f} MB (+{extra:.0f} MB, worker "
        f"{hostile['children_mb']:.0f} MB); "
        + "; ".join(
            f"{u.rsplit('/', 1)[1]}: {d['decision']} ({d['decision_detail']}) in {d['extract_seconds']:.2f} s"
            for u, d in sorted(docs.items())
        )
    )
    assert set(docs) == set(pages(True))  # nothing silently lost
    assert docs["http://example.org/50mb"]["decision"] == "too_large"
    assert "max_html_bytes" in docs["http://example.org/50mb"]["decision_detail"]
    assert docs["http://example.org/nested"]["decision"] in ("empty", "extract_failed", "extract_timeout")
    assert docs["http://example.org/nested"]["decision_detail"]
    for d in docs.values():
        assert d["extract_seconds"] is not None and d["extract_seconds"] <= wall_cap, d["url"]
    assert extra < EXTRA_RSS_BOUND_MB, (hostile, base)
    assert hostile["children_mb"] < WORKER_RSS_BOUND_MB, hostile


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    step(sys.argv[1], Path(sys.argv[2]))
