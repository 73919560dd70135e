"""Per-language keep rates before -> after the per-language quality rules, on real multilingual pages, in one run.

Pages:
- Debian's `debian-reference-{de,en,es,fr,id,it,ja,pt}` packages (HTML translations of one guide; `en` is the
  control, it must not change). `--debs DIR` reads the .deb files from DIR; without it they are fetched once
  with `apt-get download` into bench/out/multilingual/debs. The HTML pages are packed into one WARC of
  response records (bench/out/multilingual/debian-reference.warc.gz): the bench data, never the repo's.
- The Common Crawl excerpt ../shared/data/warc/resiliparse_warcfile_CC-MAIN-2020-34.warc.gz (its Chinese
  pages, and every other language lid.176 finds there).
- trafilatura's evaluation set, ../shared/data/extraction_gold/trafilatura_eval_e90b0ef5.tar.xz: 990 real
  web pages (mostly German and English, a few others), packed into a WARC the same way (`--max-eval N`
  takes the first N in URL order; 0 skips them).

Each HTML response goes through `pipeline.DocumentCurator` twice: "before" = the English rules for every
language (`QualityThresholds(per_language=False)`, what the code did until now), "after" = the default
thresholds (per-language rules on). Rows are grouped by the language lid.176 gave (identical on both sides,
checked). Prints keep rates per language and source, the decisions that changed, how many documents fail
the language-sensitive rules (stop words, word count, word length, alphabetic tokens) before and after
whatever rule dropped them first, and a few kept and dropped pages per language (URL, decision, first
characters of the text). `--json` prints one JSON object instead.

    python bench/multilingual.py [--debs DIR] [--max-eval N] [--examples 3] [--json]

Exits 2 when neither the packages nor the shared WARC can be read.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import resource
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import SHARED_DATA, trafilatura_eval_pages, write_warc  # noqa: E402

OUT = ROOT / "bench" / "out" / "multilingual"
LANGS = ("de", "en", "es", "fr", "id", "it", "ja", "pt")
SHARED_WARC = SHARED_DATA / "warc" / "resiliparse_warcfile_CC-MAIN-2020-34.warc.gz"
DEBIAN_URL = "https://www.debian.org/doc/manuals/debian-reference/"
WATCHED_RULES = (
    "gopher_quality_stop_words",
    "gopher_quality_n_words_low",
    "gopher_quality_mean_word_len_low",
    "gopher_quality_mean_word_len_high",
    "gopher_quality_alpha_token_frac",
)


def fetch_debs(debs: Path | None) -> Path | None:
    """The folder holding the debian-reference .deb files (downloaded with apt-get when not given)."""
    if debs is not None:
        return debs
    target = OUT / "debs"
    if len(glob.glob(str(target / "debian-reference-*.deb"))) >= len(LANGS):
        return target
    target.mkdir(parents=True, exist_ok=True)
    cmd = ["apt-get", "download", *(f"debian-reference-{lang}" for lang in LANGS)]
    done = subprocess.run(cmd, cwd=target, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"apt-get download failed ({done.stderr.strip()[:300]}); pass --debs DIR", file=sys.stderr)
        return None
    return target


def pack_debian(debs: Path) -> Path:
    """Every HTML page of the packages in one WARC (rebuilt when the set of packages changes)."""
    files = sorted(glob.glob(str(debs / "debian-reference-*.deb")))
    key = hashlib.sha256("".join(Path(f).name for f in files).encode()).hexdigest()[:12]
    out = OUT / f"debian-reference-{key}.warc.gz"
    pages = []
    if not out.exists():
        for deb in files:
            extract = OUT / "x" / Path(deb).stem
            extract.mkdir(parents=True, exist_ok=True)
            subprocess.run(["dpkg-deb", "-x", deb, str(extract)], check=True)
            for page in sorted(extract.rglob("*.html")):
                pages.append((DEBIAN_URL + page.name, page.read_bytes(), "text/html; charset=utf-8"))
    return write_warc(out, pages)


def pack_trafilatura_eval(limit: int) -> Path | None:
    """The first `limit` pages (URL order) of trafilatura's evaluation set in one WARC (charset left to the
    extractor, as the pages were saved)."""
    out = OUT / f"trafilatura-eval-{limit}.warc.gz"
    if out.exists():
        return out
    pages = trafilatura_eval_pages(limit)
    if pages is None:
        return None
    return write_warc(out, [(url, path.read_bytes(), "text/html") for url, path in pages])


def read_records(warc: Path, source: str) -> list[dict]:
    """The HTML responses of a WARC as the funnel's raw records."""
    from warcio.archiveiterator import ArchiveIterator

    from assets.curated.pipeline import is_html

    out = []
    with open(warc, "rb") as fh:
        for rec in ArchiveIterator(fh):
            if rec.rec_type != "response" or rec.http_headers is None:
                continue
            ctype = rec.http_headers.get_header("Content-Type")
            if not is_html(ctype):
                continue
            payload = rec.content_stream().read()
            status = int(rec.http_headers.get_statuscode() or 0)
            rid = rec.rec_headers.get_header("WARC-Record-ID") or f"{source}-{len(out)}"
            out.append(
                {
                    "record_id": rid,
                    "deletion_key": rid,
                    "crawl": source,
                    "segment": source,
                    "target_uri": rec.rec_headers.get_header("WARC-Target-URI"),
                    "host": None,
                    "warc_date": None,
                    "http_status": status,
                    "content_type": ctype,
                    "payload": payload,
                    "payload_sha1": hashlib.sha1(payload).hexdigest(),
                    "_source": source,
                }
            )
    return out


def reference_lm() -> str:
    """The reference KenLM model, estimated once into bench/out (as the curated/reference_lm asset does)."""
    from assets.curated.models import ReferenceLMParams
    from assets.curated.ngram_lm import build_reference_lm

    path = OUT / "reference_lm.arpa"
    if not path.exists():
        params = ReferenceLMParams()
        build_reference_lm(params.corpus_path, path, order=params.order)
    return str(path)


def curate_both(records: list[dict]) -> tuple[list[dict], float, float]:
    """Each record under the English-only rules and under the per-language rules; CPU seconds of each side
    (this process and the extraction worker; model loads included, the segmenters' on the "after" side)."""
    from assets.curated.extract import close_shared_extractors
    from assets.curated.language_rules import rules_for
    from assets.curated.pipeline import CurateParams, DocumentCurator
    from assets.curated.quality import QualityThresholds, quality_failures

    lm = reference_lm()
    english = CurateParams(quality=QualityThresholds(per_language=False))
    rows, seconds = [], {}
    for name, params in (("before", english), ("after", CurateParams())):
        t0, c0 = time.process_time(), _children_cpu()
        with DocumentCurator(params, lm) as curator:
            side = [curator.curate(r) for r in records]
        # the extraction worker is a subprocess (one per process, shared by the curators), reaped here: its CPU
        # is then in RUSAGE_CHILDREN, and each side starts its own
        close_shared_extractors()
        seconds[name] = time.process_time() - t0 + _children_cpu() - c0
        rows.append(side)
    out = []
    for rec, b, a in zip(records, *rows):
        assert b["language"] == a["language"], "language ID must not depend on the quality rules"
        scored = a["language_score"] is not None
        fails_b = quality_failures(b, english.quality) if scored else []
        fails_a = quality_failures(a, rules_for(a["language"], CurateParams().quality).thresholds) if scored else []
        out.append(
            {
                "source": rec["_source"],
                "url": rec["target_uri"],
                "language": b["language"],
                "rules": a["quality_rules"],
                "before": b["decision"] or "kept",
                "after": a["decision"] or "kept",
                "text": (a["text"] or "")[:160].replace("\n", " "),
                "n_chars": a["n_chars"],
                "fails_before": fails_b,
                "fails_after": fails_a,
            }
        )
    return out, seconds["before"], seconds["after"]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def summarise(rows: list[dict], n_examples: int) -> dict:
    """Keep rates per (source, language) before and after, changed decisions, and examples."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r["language"] is not None:
            groups[(r["source"], r["language"])].append(r)
    table = []
    for (source, lang), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1])):
        kept_b = sum(r["before"] == "kept" for r in rs)
        kept_a = sum(r["after"] == "kept" for r in rs)
        table.append(
            {
                "source": source,
                "language": lang,
                "rules": Counter(r["rules"] for r in rs).most_common(1)[0][0],
                "docs": len(rs),
                "kept_before": kept_b,
                "kept_after": kept_a,
                "keep_rate_before": round(kept_b / len(rs), 3),
                "keep_rate_after": round(kept_a / len(rs), 3),
                "reasons_before": dict(Counter(r["before"] for r in rs if r["before"] != "kept").most_common(4)),
                "reasons_after": dict(Counter(r["after"] for r in rs if r["after"] != "kept").most_common(4)),
                "failing_rule_before_after": {
                    rule: [sum(rule in r["fails_before"] for r in rs), sum(rule in r["fails_after"] for r in rs)]
                    for rule in WATCHED_RULES
                },
                "kept_examples": [_ex(r) for r in rs if r["after"] == "kept"][:n_examples],
                "dropped_examples": [_ex(r) for r in rs if r["after"] != "kept"][:n_examples],
            }
        )
    return {"groups": table}


def _ex(r: dict) -> dict:
    return {"url": r["url"], "before": r["before"], "after": r["after"], "n_chars": r["n_chars"], "text": r["text"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--debs", type=Path, help="folder with the debian-reference-*.deb files")
    ap.add_argument("--max-eval", type=int, default=990, help="pages of trafilatura's evaluation set (0: none)")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    debs = fetch_debs(args.debs)
    if debs is not None:
        records += read_records(pack_debian(debs), "debian-reference")
    if SHARED_WARC.exists():
        records += read_records(SHARED_WARC, "CC-MAIN-2020-34")
    else:
        print(f"missing {SHARED_WARC} (../shared/data): Common Crawl pages skipped", file=sys.stderr)
    if args.max_eval and (warc := pack_trafilatura_eval(args.max_eval)) is not None:
        records += read_records(warc, "trafilatura-eval")
    if not records:
        print("no pages: neither the debian-reference packages nor the shared WARC could be read", file=sys.stderr)
        return 2
    from assets.curated.quality import LANGUAGE_RULES_TABLE

    rows, s_before, s_after = curate_both(records)
    result = summarise(rows, args.examples)
    english = [r for r in rows if r["language"] == "en"]
    result.update(
        pages=len(rows),
        english_pages=len(english),
        english_decisions_changed=sum(r["before"] != r["after"] for r in english),
        cpu_seconds_before=round(s_before, 2),
        cpu_seconds_after=round(s_after, 2),
        speed_ratio_after_vs_before=round(s_before / s_after, 3) if s_after else None,
        rules_table=LANGUAGE_RULES_TABLE,
    )
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    _print(result)
    return 0


def _print(res: dict) -> None:
    print(f"{res['pages']} HTML pages; CPU s before {res['cpu_seconds_before']}, after {res['cpu_seconds_after']}")
    print(f"English pages: {res['english_pages']}, decisions changed: {res['english_decisions_changed']}\n")
    head = f"{'source':<18}{'lang':<6}{'rules':<9}{'docs':>5}{'kept before':>13}{'kept after':>12}"
    short = {r: r.replace("gopher_quality_", "") for r in WATCHED_RULES}
    print(head + "   docs failing (before->after): " + ", ".join(short.values()))
    for g in res["groups"]:
        fails = "  ".join(f"{b}->{a}" for b, a in g["failing_rule_before_after"].values())
        print(
            f"{g['source']:<18}{g['language']:<6}{g['rules']:<9}{g['docs']:>5}"
            f"{g['kept_before']:>5} ({g['keep_rate_before']:.0%}){g['kept_after']:>5} ({g['keep_rate_after']:.0%})"
            f"   {fails}"
        )
    print()
    for g in res["groups"]:
        print(f"{g['source']} {g['language']}: first drop reasons {g['reasons_before']} -> {g['reasons_after']}")
    print()
    for g in res["groups"]:
        if g["docs"] < 2:
            continue
        print(f"== {g['source']} {g['language']} (rules {g['rules']})")
        for kind in ("kept_examples", "dropped_examples"):
            for e in g[kind]:
                print(f"  {kind[:4]:<5} {e['before']:>32} -> {e['after']:<32} {e['n_chars']:>7} {e['url']}")
                print(f"        {e['text'][:110]}")


if __name__ == "__main__":
    sys.exit(main())
