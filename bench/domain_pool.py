"""Build the candidate pool of the domain classifier's data (data/domain/): main text of every HTML page in the
sample crawl (data/sample_crawl) and of the real pages in ../shared/data/extraction_gold (ScrapingHub article
benchmark, trafilatura's evaluation set), extracted with the project's own Extractor, as JSON lines
{source, url, text} (text cut to `--max-chars`). The labelled evaluation set and the weakly labelled training set
committed under data/domain/ were drawn from this pool (data/domain/README.md).

    .venv/bin/python bench/domain_pool.py --out /tmp/domain_pool.jsonl

Reads ../shared/data (says so and stops when it is missing); the committed data never needs it again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from assets.curated.extract import Extractor
from assets.curated.pipeline import is_html
from assets.raw.warc_reader import ReadContext, read_warc
from bench.common import AEB_TAR, SHARED_DATA, TRAFILATURA_EVAL_TAR

ROOT = Path(__file__).resolve().parents[1]
SHARED = SHARED_DATA / "extraction_gold"


def sample_crawl_pages() -> list[tuple[str, str, bytes, str | None]]:
    """(source, url, payload, content type) of every 2xx HTML response in data/sample_crawl, in file order."""
    out = []
    ctx = ReadContext("pool", "pool", "n/a", datetime.now(UTC))
    for path in sorted((ROOT / "data" / "sample_crawl").rglob("*.warc.gz")):
        with path.open("rb") as fh:
            for kind, row in read_warc(fh, path.name, ctx):
                status = row.get("http_status")
                if kind == "row" and is_html(row["content_type"]) and (status is None or 200 <= status < 300):
                    out.append(("sample_crawl/" + path.name, row["target_uri"], row["payload"], row["content_type"]))
    return out


def scrapinghub_pages(tmp: Path) -> list[tuple[str, str, bytes, str | None]]:
    with tarfile.open(AEB_TAR) as tar:
        tar.extractall(tmp, filter="data")
    base = tmp / "article-extraction-benchmark"
    truth = json.loads((base / "ground-truth.json").read_text())
    out = []
    for key in sorted(truth):
        html = base / "html" / f"{key}.html.gz"
        if html.exists():
            out.append(("scrapinghub_aeb", truth[key]["url"], gzip.decompress(html.read_bytes()), "text/html"))
    return out


def trafilatura_pages(tmp: Path) -> list[tuple[str, str, bytes, str | None]]:
    with tarfile.open(TRAFILATURA_EVAL_TAR) as tar:
        tar.extractall(tmp, filter="data")
    base = tmp / "trafilatura_eval" / "tests"
    meta = json.loads((base / "evaldata.json").read_text())
    out = []
    for url in sorted(meta):
        for folder in ("eval", "cache"):
            f = base / folder / meta[url]["file"]
            if f.exists():
                out.append(("trafilatura_eval", url, f.read_bytes(), "text/html"))
                break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-chars", type=int, default=3000)
    args = ap.parse_args()
    if not SHARED.exists():
        print(f"{SHARED} is missing: this script needs ../shared/data/extraction_gold", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        pages = sample_crawl_pages() + scrapinghub_pages(Path(tmp)) + trafilatura_pages(Path(tmp))
        n = 0
        with Extractor(timeout_s=5.0) as ex, open(args.out, "w", encoding="utf-8") as out:
            for source, url, payload, ctype in pages:
                r = ex.extract(payload, ctype, url)
                if r.text:
                    out.write(json.dumps({"source": source, "url": url, "text": r.text[: args.max_chars]}) + "\n")
                    n += 1
    print(f"{n} pages with text of {len(pages)} read -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
