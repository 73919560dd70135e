"""Write the domain classifier's committed data (data/domain/): the held-out evaluation set (real web pages with
their real URLs, labels read by a person: data/domain/eval_labels.tsv, guide data/domain/LABELLING.md) and the
training set (hand labels in data/domain/train_labels.tsv, weak URL-rule labels below, reference corpora), from

- the page pool of `bench/domain_pool.py` (sample crawl + ../shared extraction_gold pages, extracted text),
- the Wikipedia excerpt in data/corpus/ (encyclopedic, no URL),
- the Python 3.11 documentation sources in ../shared/data/corpus/ (code, no URL).

    .venv/bin/python bench/domain_pool.py --out /tmp/domain_pool.jsonl
    .venv/bin/python bench/domain_data.py --pool /tmp/domain_pool.jsonl

A document without a real (http/https) URL gets `url: null` and its origin in `doc`: the corpora and the
trafilatura pages keyed `hard::`/`recall::` have none, and no URL is made up for them. Every text is cut to
`assets.curated.domain.MAX_CHARS` (what the classifier reads). Reads ../shared/data (says so and stops when it is
missing); the committed files never need it again. Deterministic: same inputs, same bytes.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import lzma
import re
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

from assets.curated.domain import MAX_CHARS
from assets.curated.extract import normalise_text
from assets.curated.models import REFERENCE_CORPUS
from bench.common import PYDOCS_TAR

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "data" / "domain"
PYDOCS = 175  # Python documentation pages in training (the first by sha256 of their path)
WIKI_CHUNKS = 2  # training passages per Wikipedia article

# Weak labels for training: URL/host patterns whose class is unambiguous; first match wins; no match, no label.
WEAK_RULES: tuple[tuple[str, str], ...] = (
    (
        "forum/qa",
        r"forum|/threads?/|stackexchange\.com|reddit\.com/r/|/questions/|trustpilot\.com/reviews|/faq|open-thread"
        r"|/t\d+-",
    ),
    (
        "code",
        r"github\.com/|stackoverflow\.(com|blog)|python|programming|lemire\.me|emacs|/docs/|hackernoon\.com"
        r"|pluralsight\.com/tech-blog|toptal\.com|geeks3d\.com/hacklab|gregoryszorc|strangemachines|schneems"
        r"|/tutorials?/",
    ),
    (
        "commerce",
        r"shop|/produkte?/|/products?/|/produkt_|kredit|leasing|/user-deals/|ferienhaus|zooroyal\.de|lidl\.de"
        r"|/kaufen|welpenkaufen|/angebot|produkttest",
    ),
    ("encyclopedic", r"wikipedia\.org/wiki/|fandom\.com/wiki/|wikidot\.com|lexikon|wordsmith\.org/words"),
    ("other", r"rezept|recipe|/impressum|/kontakt|/about|wordpress\.com/|blogspot\.|/ueber-uns"),
    (
        "news",
        r"/news/|/nachrichten|/artikel/|/article|/story/|presse|/politik/|/sport/|/wirtschaft/|/meldung"
        r"|reuters|nytimes|theguardian|bbc\.|cnn\.com|latimes|washingtonpost|/\d{4}/\d{2}/\d{2}/",
    ),
)


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def host(url: str) -> str:
    return (urlsplit(url).hostname or "") if "://" in url else ""


def text_key(text: str) -> str:
    """Near-identical texts share this key (the first 300 characters, whitespace and case folded)."""
    return " ".join(text.split())[:300].lower()


def weak_label(url: str) -> str | None:
    """The first rule whose pattern matches the URL (lower-cased), or None."""
    u = url.lower()
    for label, pattern in WEAK_RULES:
        if re.search(pattern, u):
            return label
    return None


def wiki_articles() -> list[tuple[str, str]]:
    """(title, text) of every article of the reference corpus, in file order."""
    articles, title, lines = [], None, []
    with lzma.open(REFERENCE_CORPUS, "rt", encoding="utf-8") as fh:
        for line in fh:
            m = re.match(r'<doc title="([^"]*)"', line)
            if m:
                title, lines = m.group(1), []
            elif line.startswith("</doc>"):
                articles.append((title, normalise_text("".join(lines))))
            else:
                lines.append(line)
    return articles


def python_docs() -> list[tuple[str, str]]:
    """(path, text) of the Python documentation sources, sorted by sha256 of the path."""
    out = []
    with tarfile.open(PYDOCS_TAR) as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.endswith(".rst.txt"):
                text = normalise_text(tar.extractfile(m).read().decode("utf-8", "replace"))
                if len(text) >= 500:
                    out.append((m.name, text))
    return sorted(out, key=lambda p: hashlib.sha256(p[0].encode()).hexdigest())


def real_url(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https")


def read_labels(name: str) -> dict[tuple[str, str], str]:
    with open(OUT / name, encoding="utf-8") as fh:
        return {(r["source"], r["url"]): r["label"] for r in csv.DictReader(fh, delimiter="\t")}


def page_row(r: dict, label: str, label_source: str | None = None) -> dict:
    """A pool page as a data row: its real URL, or `url: null` and the pool's key in `doc`."""
    url, text = r["url"], r["text"][:MAX_CHARS]
    row = {"source": r["source"], "url": url} if real_url(url) else {"source": r["source"], "url": None, "doc": url}
    return {**row, "label": label, **({"label_source": label_source} if label_source else {}), "text": text}


def pool_rows(pool: list[dict], labelled: dict, hand: dict) -> tuple[list[dict], list[dict]]:
    """(evaluation, training) from the pool: labelled pages with a real URL are held out; hand-labelled and
    URL-rule pages are training unless their URL or near-identical text is held out."""
    evaluation, train, seen = [], [], set()
    for r in pool:
        key = (r["source"], r["url"])
        if key in labelled and key not in seen:
            if not real_url(r["url"]):
                raise ValueError(f"evaluation page {key} has no real URL")
            seen.add(key)
            evaluation.append(page_row(r, labelled[key]))
    eval_urls = {e["url"] for e in evaluation}
    eval_keys = {text_key(e["text"]) for e in evaluation}
    for r in pool:
        key = (r["source"], r["url"])
        text = r["text"][:MAX_CHARS]
        if key in seen or r["url"] in eval_urls or text_key(text) in eval_keys or len(text) < 200:
            continue
        seen.add(key)
        if key in hand:
            train.append(page_row(r, hand[key], "hand"))
        elif not r["source"].startswith("sample_crawl") and real_url(r["url"]) and (label := weak_label(r["url"])):
            train.append(page_row(r, label, "url_rule"))
    return evaluation, train


def corpus_rows() -> list[dict]:
    """Training passages of the reference corpora: no URL; `doc` names the article or file (the fold key)."""
    rows = []
    for title, text in wiki_articles():
        for c in range(WIKI_CHUNKS):
            chunk = text[c * MAX_CHARS : (c + 1) * MAX_CHARS]
            if len(chunk) >= 500:
                rows.append(
                    {"source": "data/corpus", "url": None, "doc": f"enwiki:{title}", "part": c, "label": "encyclopedic"}
                    | {"label_source": "corpus", "text": chunk}
                )
    for path, text in python_docs()[:PYDOCS]:
        rows.append(
            {"source": "python3.11-doc", "url": None, "doc": path, "label": "code", "label_source": "corpus"}
            | {"text": text[:MAX_CHARS]}
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", required=True, help="JSON lines from bench/domain_pool.py")
    args = ap.parse_args()
    if not PYDOCS_TAR.exists():
        print(f"{PYDOCS_TAR} is missing: this script needs ../shared/data/corpus", file=sys.stderr)
        return 2
    pool = [json.loads(line) for line in open(args.pool, encoding="utf-8")]
    evaluation, train = pool_rows(pool, read_labels("eval_labels.tsv"), read_labels("train_labels.tsv"))
    train += corpus_rows()
    train_hosts = {host(t["url"]) for t in train if t["url"]}
    with open(OUT / "eval.jsonl", "w", encoding="utf-8") as fh:
        for e in evaluation:
            row = {**e, "text_sha256": text_sha256(e["text"]), "host_in_training": host(e["url"]) in train_hosts}
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        for t in train:
            gz.write((json.dumps(t, ensure_ascii=False) + "\n").encode("utf-8"))
    (OUT / "train.jsonl.gz").write_bytes(buf.getvalue())
    by = lambda rows: sorted({lbl: sum(r["label"] == lbl for r in rows) for lbl in {r["label"] for r in rows}}.items())  # noqa: E731
    print(f"evaluation {len(evaluation)}: {by(evaluation)}")
    print(f"training {len(train)}: {by(train)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
