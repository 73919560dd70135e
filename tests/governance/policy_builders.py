"""A small real curated.documents for policy tests, fast: real Wikipedia paragraphs and some degraded copies
(short, repetitive, symbol-heavy), their real quality signals (`quality_signals`), and the decision the curation
pipeline takes (`language_decision`, then `quality_decision`) under the default thresholds. Language scores are
spread deterministically so the language threshold decides some documents too. Rows go into two crawls of the
real embedded catalog."""

from __future__ import annotations

import pyarrow as pa

from assets.curated.langid import language_decision
from assets.curated.pipeline import CurateParams
from assets.curated.quality import quality_decision, quality_signals
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.schemas import CURATED_DOCUMENTS
from tests.run_view.builders import document_ids, paragraphs

SEGMENTS = ("CRAWL-A/seg-1", "CRAWL-B/seg-1")
HOSTS = ("en.wikipedia.org", "example.com", "news.example.de", "blog.example.org")


def texts(n: int) -> list[str]:
    """`n` texts: every third a real paragraph, the others degraded in ways the quality rules look at."""
    base = paragraphs()
    out = []
    for i in range(n):
        p = base[i % len(base)]
        kind = i % 6
        if kind == 1:
            out.append(" ".join(p.split()[: 20 + i % 40]))  # short: the word-count rule
        elif kind == 2:
            out.append("\n".join([p[:120]] * (2 + i % 3)))  # repeated lines
        elif kind == 3:
            out.append(p + " " + " ".join(["# 1 2 3 %"] * (i % 30)))  # symbols and digits
        elif kind == 4:
            out.append("\n".join(s.strip() for s in p.split(".") if s.strip()))  # no terminal punctuation
        else:
            out.append(p)
    return out


DOMAIN_CLASSES = ("news", "code", "encyclopedic")  # as the classifier labels them


def document_rows(n: int = 72, params: CurateParams = CurateParams()) -> list[dict]:
    """Curated rows as the pipeline writes them for documents with text (signals, language, decision)."""
    rows = []
    for i, text in enumerate(texts(n)):
        crawl, segment = SEGMENTS[i % len(SEGMENTS)].split("/")
        url = f"https://{HOSTS[i % len(HOSTS)]}/doc/{i}"
        signals = quality_signals(text)
        language, score = ("en", 0.55 + (i * 37 % 45) / 100)
        reason = language_decision(language, score, params.language_threshold, None) or quality_decision(
            signals, params.quality
        )
        rows.append(
            {
                **document_ids(url, crawl, segment),
                "url": url,
                "host": HOSTS[i % len(HOSTS)],
                "domain_class": DOMAIN_CLASSES[i % len(DOMAIN_CLASSES)],
                "decision": reason,
                "kept": reason is None,
                "text": text,
                "n_chars": len(text),
                "language": language,
                "language_score": score,
                **signals,
            }
        )
    # one document that never reached the thresholds (no text): its decision is not theirs to change
    rows.append(
        {
            "doc_id": "f" * 32,
            "record_id": "<urn:uuid:http-404>",
            "deletion_key": "0" * 64,
            "crawl": "CRAWL-A",
            "segment": "seg-1",
            "url": "https://example.com/missing",
            "host": "example.com",
            "decision": "http_status",
            "kept": False,
        }
    )
    return rows


def write_documents(lakehouse: Lakehouse, n: int = 72) -> list[dict]:
    """Write `document_rows(n)` into curated.documents, one commit per crawl segment."""
    rows = document_rows(n)
    for key in SEGMENTS:
        crawl, segment = key.split("/")
        part = [r for r in rows if (r["crawl"], r["segment"]) == (crawl, segment)]
        writer = lakehouse.writer(CURATED_DOCUMENTS, {"crawl": crawl, "segment": segment})
        writer.write(pa.Table.from_pylist(part, schema=CURATED_DOCUMENTS.arrow_schema))
        writer.commit(Provenance("curated/documents", key, "test-run", "test", "test"))
    return rows
