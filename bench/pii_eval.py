"""PII / secrets detection: per-type precision and recall on the labelled set, plus speed and stray hits on
real text.

1. Labelled set (in the repo): ``tests/curated/data/pii_labelled.jsonl``, scored with the same
   ``evaluate`` function the unit test uses (a predicted span is a true positive when its type matches and
   its text equals or contains the labelled value).
2. Real text (outside the repo, ``../shared/data``): the 104-article English Wikipedia excerpt and the
   ScrapingHub article bodies. Neither should hold many PII hits, so every hit is printed for eyeballing;
   throughput of ``redact`` is compared with a baseline measured in the same run: an email + public-IPv4
   regex redactor (the scope of datatrove's PIIFormatter).

    python bench/pii_eval.py [--data ../shared/data] [--show 20]
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import lzma
import re
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.curated.pii import PII_TYPES, evaluate, find_pii, format_report, redact  # noqa: E402
from bench.common import AEB_IN_DATA, AEB_PREFIX, SHARED_DATA  # noqa: E402

LABELLED = ROOT / "tests" / "curated" / "data" / "pii_labelled.jsonl"
ENWIKI = Path("corpus") / "enwiki_excerpt_clean_104articles.txt.xz"

_BASE_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
_BASE_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")


def baseline_redact(text: str) -> str:
    """Email + public IPv4 replacement only, the way simple web-data pipelines do it."""

    def ip(m: re.Match) -> str:
        try:
            return "<IP_ADDRESS>" if ipaddress.ip_address(m.group()).is_global else m.group()
        except ValueError:
            return m.group()

    return _BASE_IPV4.sub(ip, _BASE_EMAIL.sub("<EMAIL>", text))


def load_real_text(data: Path) -> dict[str, list[str]]:
    """{corpus name: documents} for whatever of the shared real text is present."""
    out: dict[str, list[str]] = {}
    if (data / ENWIKI).exists():
        out["enwiki_104"] = [lzma.decompress((data / ENWIKI).read_bytes()).decode("utf-8")]
    if (data / AEB_IN_DATA).exists():
        with tarfile.open(data / AEB_IN_DATA) as tar:
            truth = json.load(tar.extractfile(AEB_PREFIX + "ground-truth.json"))
        out["aeb_articles"] = [truth[k]["articleBody"] for k in sorted(truth)]
    return out


def best_of(fn, docs: list[str], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for d in docs:
            fn(d)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=SHARED_DATA)
    ap.add_argument("--show", type=int, default=20, help="stray hits to print per corpus")
    args = ap.parse_args()

    examples = [json.loads(line) for line in LABELLED.read_text(encoding="utf-8").splitlines() if line.strip()]
    n_spans = sum(len(e["spans"]) for e in examples)
    print(
        f"labelled set: {len(examples)} texts, {n_spans} labelled spans, "
        f"{sum(1 for e in examples if not e['spans'])} texts without PII"
    )
    metrics = evaluate(examples)
    print(format_report(metrics))
    worst = min(min(m["precision"], m["recall"]) for m in metrics.values())
    print(f"worst per-type precision/recall: {worst:.3f}\n")

    corpora = load_real_text(args.data)
    if not corpora:
        print(
            f"real text MISSING: neither {args.data / ENWIKI} nor {args.data / AEB_IN_DATA} exists; "
            "skipping the speed / stray-hit part (pass --data DIR)"
        )
        return 0
    for name, docs in corpora.items():
        n_bytes = sum(len(d.encode("utf-8")) for d in docs)
        hits = [(d, m) for d in docs for m in find_pii(d)]
        ours = best_of(redact, docs)
        base = best_of(baseline_redact, docs)
        counts = Counter(m.type for _, m in hits)
        print(
            f"{name}: {len(docs)} docs, {n_bytes / 1e6:.2f} MB; redact {n_bytes / 1e6 / ours:.2f} MB/s, "
            f"baseline (email+IPv4) {n_bytes / 1e6 / base:.2f} MB/s, ratio ours/baseline time "
            f"{ours / base:.1f}x"
        )
        print("  hits: " + (", ".join(f"{t}={counts[t]}" for t in PII_TYPES if counts[t]) or "none"))
        for d, m in hits[: args.show]:
            print(f"    {m.type:<14} {d[max(0, m.start - 30) : m.end + 10]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
