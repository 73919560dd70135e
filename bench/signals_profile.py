"""What curation costs per document after the extractor engine, signal by signal, on real pages; and a dump of
every curated column to prove a change leaves every value as it was.

The pages: the sample crawl's HTML responses and the real pages `bench/curate.py --real-pages` packs (the first
990 of trafilatura's evaluation set and ScrapingHub's article pages, from ../shared/data). Each page is extracted
once with trafilatura in this process (our options, a fresh dedup cache per page, as the extraction worker does)
and the engine's raw output is cached under bench/out/signals, so a run times only the steps after the engine:

    decode      charset decoding of the payload (`extract._decode_html`, done before the engine)
    normalise   `extract.normalise_text` of the engine's output
    pii         `pii.redact`
    sha256      the text hash
    langid      lid.176 (`LanguageIdentifier.predict`)
    rules       `language_rules.rules_for` (the language's rules, segmenter loads included once)
    quality     `quality.quality_signals` (with the language's word rules)
    kenlm       `PerplexityScorer.score`
    decision    `language_decision` + `quality_decision`
    domain      `domain.label_domains` on chunks of 32 rows (the curate chunk)

    python bench/signals_profile.py [--pages 990] [--repeats 3] [--cprofile]
    python bench/signals_profile.py --dump OUT.jsonl        # every curated column, via the curate pipeline
    python bench/signals_profile.py --compare A.jsonl B.jsonl

`--dump` runs the real funnel (`pipeline.curate_records`: extraction worker, every signal, domain labels) over
the same pages and writes one JSON line per row without `extract_seconds` (wall time), floats as `float.hex`;
`--compare` says, per column, how many rows differ (exit 1 on any difference).
"""

from __future__ import annotations

import argparse
import cProfile
import gzip
import json
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import BENCH_OUT, warc_paths  # noqa: E402

OUT = BENCH_OUT / "signals"
SAMPLE_CRAWL = ROOT / "data" / "sample_crawl"
CHUNK = 32  # CurateParams.chunk_docs
STAGES = ("decode", "normalise", "pii", "sha256", "langid", "rules", "quality", "kenlm", "decision", "domain")


def load_records(pages: int) -> list[dict]:
    """The sample crawl's HTML records, then the real pages' (none without ../shared/data)."""
    from bench.curate import pack_real_pages
    from bench.multilingual import read_records

    roots = [SAMPLE_CRAWL]
    if pages > 0 and (real := pack_real_pages(pages)) is not None:
        roots.append(real)
    return [r for root in roots for path in warc_paths(root) for r in read_records(path, path.parent.parent.name)]


def engine_outputs(records: list[dict], pages: int) -> list[str | None]:
    """trafilatura's raw output per record (None: nothing extracted or refused before the engine), cached."""
    cache = OUT / f"engine-{pages}.json.gz"
    if cache.exists():
        return json.loads(gzip.decompress(cache.read_bytes()))
    from assets.curated.extract import DEFAULT_OPTIONS, _decode_html, _load_trafilatura

    extract = _load_trafilatura(DEFAULT_OPTIONS["trafilatura"])
    out: list[str | None] = []
    for rec in records:
        html, _ = _decode_html(rec["payload"], rec["content_type"])
        ok = rec["http_status"] in range(200, 300) and html is not None and html.strip()
        out.append(extract(html, rec["target_uri"]) if ok else None)
    OUT.mkdir(parents=True, exist_ok=True)
    cache.write_bytes(gzip.compress(json.dumps(out).encode()))
    return out


def time_stages(records: list[dict], raw: list[str | None], lm_path: str) -> tuple[dict[str, float], int]:
    """Seconds per stage over every record the engine gave text for, and how many reached the signals."""
    from assets.curated.domain import label_domains
    from assets.curated.extract import _decode_html, normalise_text
    from assets.curated.langid import LanguageIdentifier, language_decision
    from assets.curated.language_rules import rules_for
    from assets.curated.perplexity import PerplexityScorer
    from assets.curated.pii import redact
    from assets.curated.pipeline import CurateParams, text_sha256
    from assets.curated.quality import quality_decision, quality_signals

    p = CurateParams()
    lid, lm = LanguageIdentifier(), PerplexityScorer(lm_path)
    clock = time.process_time  # CPU seconds of the whole process (the tokenizer's threads too), whatever else runs
    spent = dict.fromkeys(STAGES, 0.0)
    rows: list[dict] = []
    n = 0
    for rec, value in zip(records, raw):
        if not value:
            continue
        t0 = clock()
        _decode_html(rec["payload"], rec["content_type"])
        t1 = clock()
        text = normalise_text(value)
        t2 = clock()
        text, _ = redact(text)
        t3 = clock()
        if not text:
            continue
        text_sha256(text)
        t4 = clock()
        lang, score = lid.predict(text)
        t5 = clock()
        rules = rules_for(lang, p.quality)
        t6 = clock()
        signals = quality_signals(text, rules.words)
        t7 = clock()
        lm.score(text)
        t8 = clock()
        if language_decision(lang, score, p.language_threshold, None) is None:
            quality_decision(signals, rules.thresholds)
        t9 = clock()
        for stage, a, b in zip(STAGES, (t0, t1, t2, t3, t4, t5, t6, t7, t8), (t1, t2, t3, t4, t5, t6, t7, t8, t9)):
            spent[stage] += b - a
        n += 1
        rows.append({"text": text, "url": rec["target_uri"]})
    for i in range(0, len(rows), CHUNK):
        t0 = clock()
        label_domains(rows[i : i + CHUNK])
        spent["domain"] += clock() - t0
    return spent, n


def profile_main(args) -> int:
    from bench.multilingual import reference_lm

    records = load_records(args.pages)
    raw = engine_outputs(records, args.pages)
    lm_path = reference_lm()
    time_stages(records[:64], raw[:64], lm_path)  # models, segmenters and caches loaded before timing
    profiler = cProfile.Profile() if args.cprofile else None
    runs = []
    for _ in range(args.repeats):
        if profiler:
            profiler.enable()
        spent, n = time_stages(records, raw, lm_path)
        if profiler:
            profiler.disable()
        runs.append(spent)
    best = {s: min(r[s] for r in runs) for s in STAGES}
    print(f"{len(records)} records, {n} documents reach the signals; ms per document (best of {args.repeats}):")
    for s in STAGES:
        print(f"  {s:<10}{1000 * best[s] / n:>8.3f}")
    print(f"  {'total':<10}{1000 * sum(best.values()) / n:>8.3f}")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    return 0


def _plain(value):
    """A column value as JSON that keeps every float's bits."""
    return value.hex() if isinstance(value, float) else value


def dump_main(args) -> int:
    from assets.curated.extract import close_shared_extractors
    from assets.curated.pipeline import CurateParams, curate_records
    from bench.multilingual import reference_lm

    records = load_records(args.pages)
    chunks = [records[i : i + CHUNK] for i in range(0, len(records), CHUNK)]
    n = 0
    with open(args.dump, "w", encoding="utf-8") as fh:
        for rows in curate_records(chunks, CurateParams(), reference_lm()):
            for row in rows:
                row.pop("extract_seconds")
                fh.write(json.dumps({k: _plain(v) for k, v in sorted(row.items())}, ensure_ascii=False) + "\n")
                n += 1
    close_shared_extractors()
    print(f"{n} rows -> {args.dump}")
    return 0


def compare_main(a_path: str, b_path: str) -> int:
    a = [json.loads(line) for line in open(a_path, encoding="utf-8")]
    b = [json.loads(line) for line in open(b_path, encoding="utf-8")]
    if len(a) != len(b):
        print(f"row counts differ: {len(a)} vs {len(b)}")
        return 1
    columns = sorted(set().union(*a, *b))
    differ = {c: sum(x.get(c) != y.get(c) for x, y in zip(a, b)) for c in columns}
    bad = {c: k for c, k in differ.items() if k}
    print(f"{len(a)} rows, {len(columns)} columns compared exactly (floats bit for bit): ", end="")
    print("all identical" if not bad else f"differences {bad}")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=990, help="trafilatura evaluation pages (plus the AEB pages)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cprofile", action="store_true", help="also print cProfile's top functions")
    ap.add_argument("--dump", help="write every curated column of every page here instead of timing")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two --dump files")
    args = ap.parse_args()
    if args.compare:
        return compare_main(*args.compare)
    return dump_main(args) if args.dump else profile_main(args)


if __name__ == "__main__":
    sys.exit(main())
