"""One raw HTML record -> one curated document row: the per-document funnel (order of decisions: README.md).
No Dagster here."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing import get_context

from assets.curated.domain import label_domains
from assets.curated.extract import (
    DEFAULT_ENGINE,
    DEFAULT_MAX_HTML_BYTES,
    DEFAULT_TIMEOUT_S,
    ENGINES,
    Engine,
    close_shared_extractors,
    shared_extractor,
)
from assets.curated.langid import DEFAULT_LANG_THRESHOLD, LanguageIdentifier, language_decision
from assets.curated.language_rules import check_rules_table, rules_for
from assets.curated.perplexity import HEAD_PCT, TAIL_PCT, PerplexityScorer
from assets.curated.pii import PII_TYPES, redact
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_decision, quality_signals
from assets.knobs import knob

DECISION_HTTP_STATUS = "http_status"
HTML_CONTENT_TYPES = ("text/html", "application/xhtml+xml")

# Columns of raw.warc_records the funnel reads.
RAW_COLUMNS = (
    "record_id",
    "deletion_key",
    "crawl",
    "segment",
    "target_uri",
    "host",
    "warc_date",
    "http_status",
    "content_type",
    "payload",
    "payload_sha1",
)


@dataclass(frozen=True)
class CurateParams:
    """Every knob of curated/documents, defaulting to the published values (README.md); only `hashed()`
    changes what is stored."""

    language_threshold: float = knob(
        DEFAULT_LANG_THRESHOLD,
        "a document is kept only when lid.176's top score is at least this (FineWeb, DCLM: 0.65)",
    )
    allowed_languages: tuple[str, ...] | None = knob(None, "languages a kept document may be in; null: any")
    quality: QualityThresholds = knob(
        QualityThresholds(), "quality thresholds (published defaults: Gopher, C4, FineWeb); null disables a rule"
    )
    extract_timeout_s: float = knob(
        DEFAULT_TIMEOUT_S,
        "CPU seconds per page: a safety net for pathological pages, well above "
        "what ordinary pages need (the sample crawl's slowest takes ~1.8 s), so "
        "no decision depends on timing jitter",
    )
    max_html_bytes: int = knob(DEFAULT_MAX_HTML_BYTES, "a larger payload is not extracted (decision too_large)")
    extractor: Engine = knob(
        DEFAULT_ENGINE,
        "main-text extractor: trafilatura (FineWeb's) or resiliparse (DCLM's, several times faster); "
        "same decoding, limits and normalisation",
    )
    ppl_head_pct: float = knob(
        float(HEAD_PCT),
        "perplexity percentile (per language, within the partition) at or under which a document is in the head bucket",
    )
    ppl_tail_pct: float = knob(
        float(TAIL_PCT), "perplexity percentile above which a document is in the tail bucket (middle in between)"
    )
    workers: int = knob(1, "processes curating in parallel within a task (results are identical)")
    chunk_docs: int = knob(32, "documents handed to a worker process at a time")
    files_per_slice: int = knob(1, "raw data files per task: the unit an executor runs (results do not depend on it)")

    def __post_init__(self) -> None:
        if self.extractor not in ENGINES:  # a typo in a config or a policy fails here, not in a worker
            raise ValueError(f"extractor must be one of {ENGINES}, got {self.extractor!r}")

    def hashed(self) -> dict:
        """What changes the stored rows (recorded as the snapshot's config hash). The extractor is recorded
        only when it is not the default: every snapshot before the knob existed extracted with trafilatura,
        and so keeps its config hash."""
        out = {k: v for k, v in asdict(self).items() if k not in ("workers", "chunk_docs", "files_per_slice")}
        if out["extractor"] == DEFAULT_ENGINE:
            del out["extractor"]
        return out


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
    The models are loaded once per process (partitions curated in one process share them; the extractor
    worker once per thread: `extract.shared_extractor`)."""

    def __init__(self, params: CurateParams, lm_path: str) -> None:
        check_rules_table(params.quality)
        self.params, self.lm_path = params, lm_path
        self.extractor = shared_extractor(params.extract_timeout_s, params.max_html_bytes, params.extractor)
        self.lid = _language_identifier()
        self.lm = _scorer(lm_path, os.stat(lm_path).st_mtime_ns)

    def close(self) -> None:
        """Nothing to release: the models and the extractor worker stay for the next partition of this
        process (`close_curation_workers` stops the worker; it also stops at exit)."""

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
            "quality_rules": None,
            **_empty_signals(),
        }
        status = rec["http_status"]
        if status is not None and not 200 <= status < 300:
            return _decide(row, DECISION_HTTP_STATUS, f"HTTP {status}")
        ex = self.extractor.extract(rec["payload"], rec["content_type"], rec["target_uri"])
        row["extract_seconds"] = round(ex.seconds, 6)
        if ex.decision is not None:
            return _decide(row, ex.decision, ex.detail)
        # the extractor's text is already normalised (normalise_text is idempotent: tests/curated/test_extract.py)
        text, counts = redact(ex.text or "")
        if not text:
            return _decide(row, "empty", "no text after normalisation")
        row.update({f"pii_{t}_count": n for t, n in counts.items()})
        row.update(text=text, text_sha256=text_sha256(text), n_chars=len(text))
        lang, score = self.lid.predict(text)
        row.update(language=lang, language_score=round(score, 6))
        rules = rules_for(lang, p.quality)
        signals = quality_signals(text, rules.words)
        row.update(signals, quality_rules=rules.name)
        ppl = self.lm.score(text)
        row.update(lm_log10_prob_per_word=ppl.log10_prob_per_word, perplexity=ppl.perplexity, lm_n_words=ppl.n_words)
        reason = language_decision(
            lang, score, p.language_threshold, set(p.allowed_languages) if p.allowed_languages else None
        )
        if reason is None:
            reason = quality_decision(signals, rules.thresholds)
        return _decide(row, reason, None) if reason else _decide(row, None, None)


def _decide(row: dict, decision: str | None, detail: str | None) -> dict:
    row["decision"] = decision
    row["decision_detail"] = detail
    row["kept"] = decision is None
    return row


# -- parallel execution: long-lived process workers, each holding its own models; results keep input order --
# A pool of `workers` processes is started once per process and kept across partitions (and runs, when they
# share the process): each worker loads the models and starts its extraction child on its first chunk, then
# serves every later partition without paying that again (`bench/curate.py --partition-overhead`, 2 workers: a
# partition of two records decided before extraction took 1.9 s of wall time when each partition started its
# own pool, 0.001 s now). What a worker holds never changes a row: the models are read-only and each page gets
# a fresh extraction state, so the rows are those of one process.

_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()
_WORKER: DocumentCurator | None = None  # in a pool worker: the curator of the last chunk's parameters


def _curate_chunk(params: CurateParams, lm_path: str, records: list[dict]) -> list[dict]:
    """In a pool worker: the chunk's rows, with a curator for these parameters (the models stay cached across
    curators: a new one is cheap)."""
    global _WORKER
    if _WORKER is None or (_WORKER.params, _WORKER.lm_path) != (params, lm_path):
        _WORKER = DocumentCurator(params, lm_path)
    return [_WORKER.curate(r) for r in records]


def _pool(workers: int) -> ProcessPoolExecutor:
    """This process's pool of `workers` curation processes (spawned, not forked: the caller may hold threads
    and locks), started on first use."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ProcessPoolExecutor(workers, mp_context=get_context("spawn"))
        return pool


def _drop_pool(workers: int, pool: ProcessPoolExecutor) -> None:
    """Forget a broken pool (a worker died): the next partition starts a fresh one."""
    with _POOLS_LOCK:
        if _POOLS.get(workers) is pool:
            del _POOLS[workers]
    pool.shutdown(wait=False, cancel_futures=True)


def close_curation_workers() -> None:
    """Stop this process's curation pools and its own extraction workers (they also stop at exit)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)
    close_shared_extractors()


def curate_records(records: Iterable[Sequence[dict]], params: CurateParams, lm_path: str) -> Iterator[list[dict]]:
    """Curate chunks of records, yielding one list of rows per chunk, in input order, with `params.workers`
    processes (whatever their number, the rows are the same); each chunk's texts get their domain labels in one
    embedding batch (`domain.label_domains`)."""
    for rows in _curate_chunks(records, params, lm_path):
        yield label_domains(rows)


def _curate_chunks(records: Iterable[Sequence[dict]], params: CurateParams, lm_path: str) -> Iterator[list[dict]]:
    if params.workers <= 1:
        with DocumentCurator(params, lm_path) as curator:
            for chunk in records:
                yield [curator.curate(r) for r in chunk]
        return
    pool = _pool(params.workers)
    pending: list[Future] = []  # bounded look-ahead: at most 2 chunks per worker in flight
    try:
        for chunk in records:
            pending.append(pool.submit(_curate_chunk, params, lm_path, list(chunk)))
            if len(pending) >= 2 * params.workers:
                yield pending.pop(0).result()
        while pending:
            yield pending.pop(0).result()
    except BrokenProcessPool:
        _drop_pool(params.workers, pool)
        raise
    finally:  # a consumer that stops early (or fails) leaves at most its look-ahead behind: what the pool has
        # not started is cancelled; what sits in its call queue is already marked running and finishes
        for fut in pending:
            fut.cancel()


def funnel(decisions: Iterable[str | None]) -> list[tuple[str, int]]:
    """Documents per decision reason, `kept` last (the Mini-C4-style funnel table)."""
    c = Counter(d or "kept" for d in decisions)
    kept = c.pop("kept", 0)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0])) + [("kept", kept)]
