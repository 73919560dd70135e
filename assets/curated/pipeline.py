"""One raw HTML record -> one curated document row: the per-document funnel. No Dagster here.

Order of decisions (the first failing step names the document's `decision`; later signals are still
computed whenever there is text, so thresholds can be changed without recomputing):
  1. `http_status`                   the response is not 2xx
  2. extraction                      `too_large`, `extract_failed`, `extract_timeout`, `empty` (trafilatura)
  3. language                        `language_score` (< threshold), `language_not_allowed`
  4. quality                         the first failing rule of `quality.QUALITY_REASONS`
Stored text is the extracted, normalised (NFC, whitespace) text with PII and secrets replaced by typed
placeholders; language, quality and perplexity are measured on that stored text.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from multiprocessing import get_context

import pyarrow as pa

from assets.curated.extract import Extractor, normalise_text
from assets.curated.langid import DEFAULT_LANG_THRESHOLD, LanguageIdentifier, language_decision
from assets.curated.perplexity import HEAD_PCT, TAIL_PCT, PerplexityScorer
from assets.curated.pii import PII_TYPES, redact
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_decision, quality_signals

DECISION_HTTP_STATUS = "http_status"
HTML_CONTENT_TYPES = ("text/html", "application/xhtml+xml")

# Columns of raw.warc_records the funnel reads.
RAW_COLUMNS = ("record_id", "deletion_key", "crawl", "segment", "target_uri", "host", "warc_date", "http_status",
               "content_type", "payload", "payload_sha1")


@dataclass(frozen=True)
class CurateParams:
    """Every knob of the funnel, defaulting to the published values."""

    language_threshold: float = DEFAULT_LANG_THRESHOLD
    allowed_languages: tuple[str, ...] | None = None
    quality: QualityThresholds = field(default_factory=QualityThresholds)
    # CPU seconds per page: a safety net for pathological pages, set well above what ordinary pages need
    # (the sample crawl's slowest takes ~1.8 s), so no decision depends on timing jitter
    extract_timeout_s: float = 5.0
    max_html_bytes: int = 5_000_000
    ppl_head_pct: float = HEAD_PCT
    ppl_tail_pct: float = TAIL_PCT

    def as_config(self) -> dict:
        """A plain mapping for the provenance config hash."""
        return asdict(self)


def is_html(content_type: str | None) -> bool:
    """True for HTML responses (by the HTTP Content-Type)."""
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime in HTML_CONTENT_TYPES


def make_doc_id(record_id: str, payload_sha1: str) -> str:
    """Stable, content-addressed document id: the same record and payload give the same id everywhere."""
    return hashlib.sha256(f"tokenlake-doc-v1\0{record_id}\0{payload_sha1}".encode()).hexdigest()[:32]


def text_sha256(text: str) -> str:
    """The exact-dedup key of a stored text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _empty_signals() -> dict:
    out = {name: None for name in QUALITY_SIGNAL_TYPES}
    out.update({f"pii_{t}_count": None for t in PII_TYPES})
    return out


@lru_cache(maxsize=1)
def _language_identifier() -> LanguageIdentifier:
    return LanguageIdentifier()


@lru_cache(maxsize=2)
def _scorer(lm_path: str, mtime_ns: int) -> PerplexityScorer:
    return PerplexityScorer(lm_path)


class DocumentCurator:
    """Holds the models (extractor worker, language identifier, LM) and curates records one by one.
    The read-only models are loaded once per process (partitions curated in one process share them)."""

    def __init__(self, params: CurateParams, lm_path: str) -> None:
        self.params = params
        self.extractor = Extractor(timeout_s=params.extract_timeout_s, max_html_bytes=params.max_html_bytes)
        self.lid = _language_identifier()
        self.lm = _scorer(lm_path, os.stat(lm_path).st_mtime_ns)

    def close(self) -> None:
        self.extractor.close()

    def __enter__(self) -> DocumentCurator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def curate(self, rec: dict) -> dict:
        """The curated row of one raw record (without `ppl_bucket`, which needs the whole partition)."""
        p = self.params
        row = {
            "doc_id": make_doc_id(rec["record_id"], rec["payload_sha1"]),
            "record_id": rec["record_id"],
            "deletion_key": rec["deletion_key"],
            "crawl": rec["crawl"],
            "segment": rec["segment"],
            "url": rec["target_uri"],
            "host": rec["host"],
            "warc_date": rec["warc_date"],
            "http_status": rec["http_status"],
            "content_type": rec["content_type"],
            "decision": None,
            "decision_detail": None,
            "text": None,
            "text_sha256": None,
            "n_chars": None,
            "extract_seconds": None,
            "language": None,
            "language_score": None,
            "lm_log10_prob_per_word": None,
            "perplexity": None,
            "lm_n_words": None,
            "ppl_bucket": None,
            **_empty_signals(),
        }
        status = rec["http_status"]
        if status is not None and not 200 <= status < 300:
            return _decide(row, DECISION_HTTP_STATUS, f"HTTP {status}")
        ex = self.extractor.extract(rec["payload"], rec["content_type"], rec["target_uri"])
        row["extract_seconds"] = round(ex.seconds, 6)
        if ex.decision is not None:
            return _decide(row, ex.decision, ex.detail)
        text, counts = redact(normalise_text(ex.text or ""))
        if not text:
            return _decide(row, "empty", "no text after normalisation")
        row.update({f"pii_{t}_count": n for t, n in counts.items()})
        row.update(text=text, text_sha256=text_sha256(text), n_chars=len(text))
        lang, score = self.lid.predict(text)
        row.update(language=lang, language_score=round(score, 6))
        signals = quality_signals(text)
        row.update(signals)
        ppl = self.lm.score(text)
        row.update(lm_log10_prob_per_word=ppl.log10_prob_per_word, perplexity=ppl.perplexity, lm_n_words=ppl.n_words)
        reason = language_decision(lang, score, p.language_threshold,
                                   set(p.allowed_languages) if p.allowed_languages else None)
        if reason is None:
            reason = quality_decision(signals, p.quality)
        return _decide(row, reason, None) if reason else _decide(row, None, None)


def _decide(row: dict, decision: str | None, detail: str | None) -> dict:
    row["decision"] = decision
    row["decision_detail"] = detail
    row["kept"] = decision is None
    return row


# -- parallel execution: process workers each hold their own models; results keep input order ----------

_WORKER: DocumentCurator | None = None


def _init_worker(params: CurateParams, lm_path: str) -> None:
    global _WORKER
    _WORKER = DocumentCurator(params, lm_path)


def _curate_chunk(records: list[dict]) -> list[dict]:
    assert _WORKER is not None
    return [_WORKER.curate(r) for r in records]


def curate_records(records: Iterable[Sequence[dict]], params: CurateParams, lm_path: str,
                   workers: int = 1) -> Iterator[list[dict]]:
    """Curate chunks of records, yielding one list of rows per chunk, in input order, whatever `workers` is."""
    if workers <= 1:
        with DocumentCurator(params, lm_path) as curator:
            for chunk in records:
                yield [curator.curate(r) for r in chunk]
        return
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn"), initializer=_init_worker,
                             initargs=(params, lm_path)) as pool:
        # bounded look-ahead: at most 2 chunks per worker in flight
        pending = []
        for chunk in records:
            pending.append(pool.submit(_curate_chunk, list(chunk)))
            if len(pending) >= 2 * workers:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()


def funnel(decisions: Iterable[str | None]) -> list[tuple[str, int]]:
    """Documents per decision reason, `kept` last (the Mini-C4-style funnel table)."""
    c = Counter(d or "kept" for d in decisions)
    kept = c.pop("kept", 0)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0])) + [("kept", kept)]


def exact_duplicate_rows(docs: pa.Table) -> pa.Table:
    """For kept documents (doc_id, crawl, segment, text_sha256): every non-first occurrence of a text hash,
    first = smallest (crawl, doc_id), with the canonical document it duplicates."""
    ordered = docs.sort_by([("text_sha256", "ascending"), ("crawl", "ascending"), ("doc_id", "ascending")])
    cols = {k: ordered[k].to_pylist() for k in ("doc_id", "crawl", "segment", "text_sha256")}
    out: dict[str, list] = {k: [] for k in ("doc_id", "crawl", "segment", "decision", "duplicate_of",
                                             "duplicate_of_crawl", "text_sha256")}
    first = 0
    for i, digest in enumerate(cols["text_sha256"]):
        if i == 0 or digest != cols["text_sha256"][first]:
            first = i
            continue
        for k in ("doc_id", "crawl", "segment", "text_sha256"):
            out[k].append(cols[k][i])
        out["decision"].append("exact_duplicate")
        out["duplicate_of"].append(cols["doc_id"][first])
        out["duplicate_of_crawl"].append(cols["crawl"][first])
    return pa.table({k: pa.array(v, pa.string()) for k, v in out.items()})
