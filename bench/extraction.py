"""Extraction fidelity per extractor on two gold sets, and our pipeline vs calling trafilatura directly.

Extractors, each through our pipeline (`Extractor`: decode_html -> the engine in the worker subprocess under the
time limit -> normalise_text): trafilatura with our options (the default), resiliparse with ours
(`extract.DEFAULT_RESILIPARSE_OPTIONS`), and trafilatura with the same options plus `fast=True` (no fallback
extractors). Gold sets (../shared/data/extraction_gold):

- trafilatura's evaluation set (990 pages, mostly German and English): each page lists text that must be in the
  extract (`with`) and text that must not (`without`); the metric is trafilatura's own (tests/comparison.py):
  counts over all pages, a `with` snippet found is a true positive, missed a false negative, a `without` snippet
  found a false positive; precision, recall and F1 of the totals. Whitespace runs are collapsed on both sides
  first (our normalisation puts paragraphs on their own lines).
- ScrapingHub's Article Extraction Benchmark (181 article pages): bag-of-whitespace-tokens precision, recall and
  F1 against `articleBody`, averaged over pages (the AEB's own evaluation).

Then, on the AEB, our trafilatura path against `trafilatura.extract` called in this process with the same options
on the raw bytes (trafilatura decodes them itself): the decoding and the worker must cost no F1.

    python bench/extraction.py [--data ../shared/data] [--timeout-s 1.0] [--limit N] [--json]

`--json` prints one JSON object on its own line (after the table). Exits 2 when the gold sets are missing
(they live outside the repo, in ../shared/data).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.curated.extract import DEFAULT_TRAFILATURA_OPTIONS, Extractor  # noqa: E402
from bench.common import (  # noqa: E402
    AEB_IN_DATA,
    BENCH_OUT,
    BENCH_TIMEOUT_S,
    SHARED_DATA,
    load_aeb,
    trafilatura_eval_pages,
)

# (line name, Extractor keyword arguments): the engines compared on both gold sets
EXTRACTORS = (
    ("trafilatura", {"engine": "trafilatura"}),
    ("resiliparse", {"engine": "resiliparse"}),
    ("trafilatura fast=True", {"engine": "trafilatura", "fast": True}),
)
Page = tuple[bytes, str | None, object]  # (html bytes, url, gold: articleBody | {"with": [...], "without": [...]})


def token_prf(gold: str, predicted: str | None) -> tuple[float, float, float]:
    """Bag-of-tokens precision, recall, F1 (whitespace tokens); empty vs empty counts as perfect."""
    gold_tokens, pred_tokens = gold.split(), (predicted or "").split()
    if not gold_tokens and not pred_tokens:
        return 1.0, 1.0, 1.0
    tp = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    precision = tp / len(pred_tokens) if pred_tokens else 0.0
    recall = tp / len(gold_tokens) if gold_tokens else 0.0
    return precision, recall, _f1(precision, recall)


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


def snippet_counts(gold: dict, predicted: str | None) -> Counter:
    """trafilatura's evaluation of one page: tp/fn over its `with` snippets, fp/tn over its `without` ones."""
    text = " ".join((predicted or "").split())
    out: Counter = Counter()
    for snippet in gold.get("with") or ():
        out["tp" if " ".join(snippet.split()) in text else "fn"] += 1
    for snippet in gold.get("without") or ():
        out["fp" if " ".join(snippet.split()) in text else "tn"] += 1
    return out


def aeb_scores(pages: list[Page], texts: list[str | None]) -> dict:
    """Mean per-page token precision, recall, F1 against articleBody."""
    scores = [token_prf(gold, text) for (_, _, gold), text in zip(pages, texts)]
    p, r, f = (statistics.fmean(s[i] for s in scores) for i in range(3))
    return {"precision": p, "recall": r, "f1": f, "page_f1": [s[2] for s in scores]}


def eval_scores(pages: list[Page], texts: list[str | None]) -> dict:
    """Precision, recall, F1 of the snippet counts summed over every page."""
    c: Counter = sum((snippet_counts(gold, text) for (_, _, gold), text in zip(pages, texts)), Counter())
    precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 0.0
    recall = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 0.0
    return {"precision": precision, "recall": recall, "f1": _f1(precision, recall), "counts": dict(c)}


def load_sets(data: Path, limit: int | None) -> dict[str, tuple[list[Page], object]]:
    """Each gold set present: name -> (pages, scoring function). trafilatura's set is unpacked under bench/out
    (`common.trafilatura_eval_pages`); the AEB is read from `data`."""
    sets: dict[str, tuple[list[Page], object]] = {}
    if (found := trafilatura_eval_pages(limit or 10**9)) is not None:
        meta = json.loads((BENCH_OUT / "trafilatura_eval" / "tests" / "evaldata.json").read_text())
        sets["trafilatura eval"] = ([(p.read_bytes(), None, meta[url]) for url, p in found], eval_scores)
    if (data / AEB_IN_DATA).is_file():
        aeb = [(html, url, gold) for _, html, url, gold in load_aeb(data / AEB_IN_DATA)][:limit]
        sets["ScrapingHub AEB"] = (aeb, aeb_scores)
    return sets


def run_extractor(pages: list[Page], timeout_s: float, options: dict) -> tuple[list[str | None], float, Counter]:
    """Texts (None when dropped), wall seconds and decisions of one extractor over the pages."""
    start = time.perf_counter()
    with Extractor(timeout_s=timeout_s, **options) as extractor:
        results = extractor.extract_many((html, "text/html", url) for html, url, _ in pages)
    return [r.text for r in results], time.perf_counter() - start, Counter(r.decision or "kept" for r in results)


def direct_trafilatura(pages: list[Page]) -> tuple[list[str | None], float]:
    """`trafilatura.extract` in this process on the raw bytes, our options, a fresh dedup cache per page."""
    import trafilatura
    from trafilatura.deduplication import LRUCache
    from trafilatura.settings import LRU_SIZE

    logging.disable(logging.WARNING)
    options = {k: v for k, v in DEFAULT_TRAFILATURA_OPTIONS.items() if k != "deduplicate"}
    start = time.perf_counter()
    texts = [
        trafilatura.extract(html, url=url, deduplicate=LRUCache(maxsize=LRU_SIZE), **options) for html, url, _ in pages
    ]
    return texts, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the shared data folder (the AEB's)")
    parser.add_argument("--timeout-s", type=float, default=BENCH_TIMEOUT_S, help="per page, as datatrove's default")
    parser.add_argument("--limit", type=int, default=None, help="only the first N pages of each set")
    parser.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = parser.parse_args()

    sets = load_sets(args.data, args.limit)
    if not sets:
        print(
            f"bench/extraction.py: no gold set under {args.data / 'extraction_gold'}. They are not part of the repo; "
            "pass --data to the folder that holds extraction_gold/.",
            file=sys.stderr,
        )
        return 2
    out: dict = {"timeout_s": args.timeout_s, "sets": {}}
    print(f"{'gold set':<18}{'extractor':<24}{'pages':>6}{'precision':>11}{'recall':>9}{'F1':>8}{'seconds':>9}")
    for set_name, (pages, score) in sets.items():
        lines = out["sets"][set_name] = {}
        for name, options in EXTRACTORS:
            texts, seconds, decisions = run_extractor(pages, args.timeout_s, options)
            s = score(pages, texts)
            lines[name] = {**s, "seconds": seconds, "decisions": dict(sorted(decisions.items()))}
            print(
                f"{set_name:<18}{name:<24}{len(pages):>6}{s['precision']:>11.4f}{s['recall']:>9.4f}{s['f1']:>8.4f}"
                f"{seconds:>9.1f}"
            )
        print_speed(set_name, lines)
    if "ScrapingHub AEB" in sets:
        out["direct"] = compare_direct(sets["ScrapingHub AEB"][0], out["sets"]["ScrapingHub AEB"]["trafilatura"])
    for line in out["sets"].values():
        for s in line.values():
            s.pop("page_f1", None)
    if args.json:
        print(json.dumps(out, sort_keys=True))
    return 0


def print_speed(set_name: str, lines: dict) -> None:
    """Each extractor's wall time against trafilatura's on the same pages in this run (speed ratio, >1 = faster),
    also kept in the JSON as `speed_vs_trafilatura`: timing belongs here, not in tests."""
    base = lines[EXTRACTORS[0][0]]["seconds"]
    for s in lines.values():
        s["speed_vs_trafilatura"] = round(base / s["seconds"], 3) if s["seconds"] > 0 else None
    ratios = ", ".join(f"{name} {s['speed_vs_trafilatura']}x" for name, s in lines.items())
    print(f"{set_name}: speed vs {EXTRACTORS[0][0]} (its seconds / each one's, same pages): {ratios}")


def compare_direct(pages: list[Page], ours: dict) -> dict:
    """Our trafilatura path vs trafilatura called directly on the AEB: F1 of each and the pages that differ."""
    texts, seconds = direct_trafilatura(pages)
    direct = aeb_scores(pages, texts)
    differ = sum(1 for a, b in zip(ours["page_f1"], direct["page_f1"]) if abs(a - b) > 1e-9)
    print(
        f"\nAEB, trafilatura.extract called directly (same options, its own decoding): F1 {direct['f1']:.4f} "
        f"({seconds:.1f} s); ours - direct {ours['f1'] - direct['f1']:+.4f}, pages whose F1 differs: {differ}"
    )
    return {"f1": direct["f1"], "seconds": seconds, "pages_differing": differ}


if __name__ == "__main__":
    sys.exit(main())
