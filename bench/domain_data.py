"""Write the domain classifier's committed data (data/domain/): the held-out evaluation set (labels read by a
person, data/domain/eval_labels.tsv) and the weakly labelled training set (URL/host rules below), from

- the page pool of `bench/domain_pool.py` (sample crawl + ../shared extraction_gold pages, extracted text),
- the Wikipedia excerpt in data/corpus/ (encyclopedic),
- the Python 3.11 documentation sources in ../shared/data/corpus/ (code).

    .venv/bin/python bench/domain_pool.py --out /tmp/domain_pool.jsonl
    .venv/bin/python bench/domain_data.py --pool /tmp/domain_pool.jsonl

Every text is cut to `assets.curated.domain.MAX_CHARS` (what the classifier reads). Reads ../shared/data (says
so and stops when it is missing); the committed files never need it again. Deterministic: same inputs, same bytes.
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
EVAL_WIKI_EVERY = 5  # every 5th article of data/corpus (by position) is held out for evaluation
EVAL_PYDOCS = 15  # Python documentation pages held out for evaluation (the first by sha256 of their path)
TRAIN_PYDOCS = 160
# archive.org pages of the sample crawl (the only forum site with many pages): those whose sha256(text_key(text))
# starts with 0-7 are training documents (hand labels from eval_labels.tsv), the others stay held out (pages with
# the same text land on the same side)
ARCHIVE_HOST = "www.archive.org"
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pool", required=True, help="JSON lines from bench/domain_pool.py")
    args = ap.parse_args()
    if not PYDOCS_TAR.exists():
        print(f"{PYDOCS_TAR} is missing: this script needs ../shared/data/corpus", file=sys.stderr)
        return 2
    pool = [json.loads(line) for line in open(args.pool, encoding="utf-8")]
    with open(OUT / "eval_labels.tsv", encoding="utf-8") as fh:
        labelled = {(r["source"], r["url"]): r["label"] for r in csv.DictReader(fh, delimiter="\t")}
    with open(OUT / "train_labels.tsv", encoding="utf-8") as fh:
        hand = {(r["source"], r["url"]): r["label"] for r in csv.DictReader(fh, delimiter="\t")}
    evaluation, train, seen = [], [], set()
    for r in pool:
        key = (r["source"], r["url"])
        text = r["text"][:MAX_CHARS]
        if key not in labelled or key in seen:
            continue
        seen.add(key)
        if host(r["url"]) == ARCHIVE_HOST and hashlib.sha256(text_key(text).encode()).hexdigest()[0] in "01234567":
            train.append(
                {"source": r["source"], "url": r["url"], "label": labelled[key], "label_source": "hand", "text": text}
            )
        else:
            evaluation.append({"source": r["source"], "url": r["url"], "label": labelled[key], "text": text})
    eval_urls = {e["url"] for e in evaluation}
    eval_keys = {text_key(e["text"]) for e in evaluation}
    for r in pool:
        key = (r["source"], r["url"])
        text = r["text"][:MAX_CHARS]
        if key in seen or r["url"] in eval_urls or text_key(text) in eval_keys or len(text) < 200:
            continue
        seen.add(key)
        if key in hand:
            train.append(
                {"source": r["source"], "url": r["url"], "label": hand[key], "label_source": "hand", "text": text}
            )
        elif not r["source"].startswith("sample_crawl") and (label := weak_label(r["url"])):
            train.append(
                {"source": r["source"], "url": r["url"], "label": label, "label_source": "url_rule", "text": text}
            )
    for i, (title, text) in enumerate(wiki_articles()):
        url = f"data/corpus/enwiki#{title}"
        if i % EVAL_WIKI_EVERY == 0:
            evaluation.append({"source": "data/corpus", "url": url, "label": "encyclopedic", "text": text[:MAX_CHARS]})
        else:
            for c in range(WIKI_CHUNKS):
                chunk = text[c * MAX_CHARS : (c + 1) * MAX_CHARS]
                if len(chunk) >= 500:
                    train.append(
                        {
                            "source": "data/corpus",
                            "url": f"{url}@{c}",
                            "label": "encyclopedic",
                            "label_source": "corpus",
                            "text": chunk,
                        }
                    )
    docs = python_docs()
    for path, text in docs[:EVAL_PYDOCS]:
        evaluation.append(
            {"source": "python3.11-doc", "url": f"python-doc:{path}", "label": "code", "text": text[:MAX_CHARS]}
        )
    for path, text in docs[EVAL_PYDOCS : EVAL_PYDOCS + TRAIN_PYDOCS]:
        train.append(
            {
                "source": "python3.11-doc",
                "url": f"python-doc:{path}",
                "label": "code",
                "label_source": "corpus",
                "text": text[:MAX_CHARS],
            }
        )
    train_hosts = {host(t["url"]) for t in train} - {""}
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
