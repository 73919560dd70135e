"""Extraction fidelity: our pipeline vs calling trafilatura directly, on the ScrapingHub Article Extraction
Benchmark (181 real article pages with hand-checked article bodies).

Metric (as in the AEB's own evaluation): bag-of-whitespace-tokens precision/recall/F1 of the extracted text
against `articleBody`, averaged over pages. Our pipeline is `Extractor` (decode_html -> trafilatura in the
worker subprocess under the time limit -> normalise_text); the baseline is `trafilatura.extract` called in
this process with the same options on the raw bytes (trafilatura decodes them itself).

    python bench/extraction.py [--data ../shared/data] [--timeout-s 1.0] [--limit N]

Exits 2 when the benchmark data is missing (it lives outside the repo, in ../shared/data).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from assets.curated.extract import DEFAULT_TRAFILATURA_OPTIONS, Extractor  # noqa: E402
from bench.common import AEB_IN_DATA, BENCH_TIMEOUT_S, SHARED_DATA, load_aeb  # noqa: E402


def token_prf(gold: str, predicted: str | None) -> tuple[float, float, float]:
    """Bag-of-tokens precision, recall, F1 (whitespace tokens); empty vs empty counts as perfect."""
    gold_tokens, pred_tokens = gold.split(), (predicted or "").split()
    if not gold_tokens and not pred_tokens:
        return 1.0, 1.0, 1.0
    tp = sum((Counter(gold_tokens) & Counter(pred_tokens)).values())
    precision = tp / len(pred_tokens) if pred_tokens else 0.0
    recall = tp / len(gold_tokens) if gold_tokens else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def summarise(name: str, scores: list[tuple[float, float, float]], seconds: float) -> float:
    p, r, f = (statistics.fmean(s[i] for s in scores) for i in range(3))
    print(f"{name:<44} precision {p:.4f}  recall {r:.4f}  F1 {f:.4f}  ({seconds:.1f} s)")
    return f


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="the shared data folder")
    parser.add_argument("--timeout-s", type=float, default=BENCH_TIMEOUT_S, help="per page, as datatrove's default")
    parser.add_argument("--limit", type=int, default=None, help="only the first N pages (by id)")
    args = parser.parse_args()

    tar_path = args.data / AEB_IN_DATA
    if not tar_path.is_file():
        print(
            f"bench/extraction.py: benchmark data not found at {tar_path}. It is not part of the repo; "
            "pass --data to the folder that holds extraction_gold/scrapinghub_aeb_4a3bc979.tar.",
            file=sys.stderr,
        )
        return 2
    pages = load_aeb(tar_path)[: args.limit]
    print(f"{len(pages)} pages from {tar_path.name}; trafilatura options {DEFAULT_TRAFILATURA_OPTIONS}")

    # (a) our pipeline
    start = time.perf_counter()
    with Extractor(timeout_s=args.timeout_s) as extractor:
        results = extractor.extract_many((html, "text/html", url) for _, html, url, _ in pages)
    ours_s = time.perf_counter() - start
    decisions = Counter(r.decision or "kept" for r in results)

    # (b) trafilatura in this process, same options, trafilatura's own decoding
    import trafilatura
    from trafilatura.deduplication import LRUCache
    from trafilatura.settings import LRU_SIZE

    logging.disable(logging.WARNING)
    options = {k: v for k, v in DEFAULT_TRAFILATURA_OPTIONS.items() if k != "deduplicate"}
    start = time.perf_counter()
    direct = [
        trafilatura.extract(html, url=url, deduplicate=LRUCache(maxsize=LRU_SIZE), **options)
        for _, html, url, _ in pages
    ]
    direct_s = time.perf_counter() - start
    # trafilatura's default dedup cache is global: a page's text can depend on the pages before it.
    start = time.perf_counter()
    direct_global = [trafilatura.extract(html, url=url, deduplicate=True, **options) for _, html, url, _ in pages]
    direct_global_s = time.perf_counter() - start

    ours_scores = [token_prf(gold, r.text) for (_, _, _, gold), r in zip(pages, results)]
    direct_scores = [token_prf(gold, text) for (_, _, _, gold), text in zip(pages, direct)]
    global_scores = [token_prf(gold, text) for (_, _, _, gold), text in zip(pages, direct_global)]
    print(f"our decisions: {dict(sorted(decisions.items()))}")
    f_ours = summarise("(a) ours: decode -> Extractor -> normalise", ours_scores, ours_s)
    f_direct = summarise("(b) trafilatura.extract, per-page dedup cache", direct_scores, direct_s)
    summarise("    trafilatura.extract, deduplicate=True", global_scores, direct_global_s)
    n_differ = sum(1 for a, b in zip(ours_scores, direct_scores) if abs(a[2] - b[2]) > 1e-9)
    print(f"F1 difference (a) - (b): {f_ours - f_direct:+.4f}  (pages whose F1 differs: {n_differ})")
    print(f"time ratio (a) / (b): {ours_s / direct_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
