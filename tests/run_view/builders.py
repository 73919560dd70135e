"""Build a small real lakehouse with a published run view, fast, without running the WARC pipeline.

Real pieces: the embedded Iceberg catalog under TOKENLAKE_HOME (a `Lakehouse`), real Wikipedia text
(data/corpus), the real GPT-2 tokenizer, the lakehouse's writer, the run view store's candidate/check/decide
code. What is skipped is extraction and filtering: the documents are written to curated.documents as kept, in
two crawl segments, with mixture labels, so loader and governance tests get a published view in a few seconds.
"""

from __future__ import annotations

import hashlib
import lzma
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import pyarrow as pa

from assets.curated.models import REFERENCE_CORPUS as CORPUS
from assets.run_view import store
from assets.run_view.mixture import Component
from assets.tokenized.tokens import encode_documents, load_tokenizer, tokenizer_row, tokens_checksum
from iceberg_catalog import TABLES, Lakehouse, Provenance, TableDef
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    QUARANTINE_EVAL_ITEMS,
    QUARANTINE_MATCHES,
    QUARANTINE_SCREENINGS,
    TOKENIZED_DOCUMENTS,
    TOKENIZED_TOKENIZERS,
)

REPO = Path(__file__).resolve().parents[2]
GPT2 = REPO / "data" / "tokenizers" / "gpt2_tokenizer.json"
SEGMENTS = ("TEST-CRAWL/seg-a", "TEST-CRAWL/seg-b")
BENCHMARK = "testbench"


@lru_cache(maxsize=1)
def paragraphs() -> tuple[str, ...]:
    """Real paragraphs of English Wikipedia text (at least 200 characters each), in file order."""
    text = lzma.open(CORPUS, "rt", encoding="utf-8").read()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("<")]
    return tuple(ln for ln in lines if len(ln) >= 200)


def provenance(asset_key: str, run_id: str = "test-run") -> Provenance:
    return Provenance(asset_key, None, run_id, "test", "test")


def document_ids(url: str, crawl: str, segment: str) -> dict:
    """The identity columns of a made-up document, all derived from its URL (the same URL, the same ids)."""
    doc_id = hashlib.sha256(url.encode()).hexdigest()[:32]
    return {
        "doc_id": doc_id,
        "record_id": f"<urn:uuid:{doc_id}>",
        "deletion_key": hashlib.sha256(url.encode()).hexdigest(),
        "crawl": crawl,
        "segment": segment,
    }


def _write(
    lakehouse: Lakehouse, t: TableDef | str, partition: dict, rows: list[dict], row_group_rows: int | None = None
) -> int:
    t = TABLES[t] if isinstance(t, str) else t
    writer = lakehouse.writer(t, partition, row_group_rows=row_group_rows)
    if rows:
        writer.write(pa.Table.from_pylist(rows, schema=t.arrow_schema))
    return writer.commit(Provenance(t.identifier, None, "test-run", "test", "test")).snapshot_id


def write_near_duplicates(lakehouse: Lakehouse, rows: list[dict]) -> None:
    """Rows of dedup.near_duplicates (partitioned by crawl): each crawl's partition replaced by its rows."""
    for crawl in sorted({r["crawl"] for r in rows}):
        _write(lakehouse, TABLES["dedup.near_duplicates"], {"crawl": crawl}, [r for r in rows if r["crawl"] == crawl])


def write_documents(
    lakehouse: Lakehouse,
    n_docs: int = 60,
    docs_per_row_group: int = 8,
    first: int = 0,
    segments=SEGMENTS,
    max_chars: int | None = 1500,
) -> list[dict]:
    """Tokenize `n_docs` real paragraphs (from paragraph `first`) into curated + tokenized tables, spread over
    `segments` round-robin; returns the documents (doc_id, segment, n_tokens, text, url)."""
    lt = load_tokenizer(GPT2, "gpt2")
    info = lt.info
    _write(
        lakehouse,
        TOKENIZED_TOKENIZERS,
        {"tokenizer_id": info.tokenizer_id},
        tokenizer_row(lt).to_pylist(),
    )
    texts = [p[:max_chars] if max_chars else p for p in paragraphs()[first : first + n_docs]]
    if len(texts) < n_docs:
        raise ValueError(f"only {len(texts)} paragraphs available from {first}, asked for {n_docs}")
    arrays = encode_documents(lt, texts)
    docs = []
    for i, (text, arr) in enumerate(zip(texts, arrays)):
        crawl, segment = segments[i % len(segments)].split("/")
        url = f"https://en.wikipedia.org/wiki/p{first + i}"
        docs.append(
            {
                **document_ids(url, crawl, segment),
                "url": url,
                "text": text,
                "tokens": arr.tobytes(),
                "n_tokens": len(arr),
                "ppl_bucket": ("head", "middle", "tail")[i % 3],
                "host": "en.wikipedia.org",
                "domain_confidence": (0.9, 0.4)[i % 2],  # the classifier's label: encyclopedic, sure or unsure
            }
        )
    for key in segments:
        crawl, segment = key.split("/")
        part = [d for d in docs if (d["crawl"], d["segment"]) == (crawl, segment)]
        _write(
            lakehouse,
            CURATED_DOCUMENTS,
            {"crawl": crawl, "segment": segment},
            [
                {
                    **{k: d[k] for k in ("doc_id", "record_id", "deletion_key", "crawl", "segment", "url", "text")},
                    "kept": True,
                    "language": "en",
                    "ppl_bucket": d["ppl_bucket"],
                }
                for d in part
            ],
        )
        _write(
            lakehouse,
            TOKENIZED_DOCUMENTS,
            {"tokenizer_id": info.tokenizer_id, "crawl": crawl, "segment": segment},
            [
                {
                    "tokenizer_id": info.tokenizer_id,
                    **{
                        k: d[k]
                        for k in ("doc_id", "record_id", "deletion_key", "crawl", "segment", "tokens", "n_tokens")
                    },
                    "token_dtype": info.token_dtype,
                    "tokens_sha256": tokens_checksum(d["tokens"]),
                    "language": "en",
                    "ppl_bucket": d["ppl_bucket"],
                    "host": d["host"],
                    "domain_class": "encyclopedic",
                    "domain_confidence": d["domain_confidence"],
                }
                for d in part
            ],
            row_group_rows=docs_per_row_group,
        )
    return docs


def screen(lakehouse: Lakehouse, segments=SEGMENTS) -> None:
    """Register one benchmark item and record that every segment was screened with no match, as the
    quarantine/matches asset does: an empty quarantine.matches partition and a quarantine.screenings row."""
    _write(
        lakehouse,
        QUARANTINE_EVAL_ITEMS,
        {"benchmark": BENCHMARK},
        [
            {
                "benchmark": BENCHMARK,
                "split": "test",
                "item_id": "0",
                "text": "an evaluation item that appears in no document of the test corpus",
                "n_words": 12,
            }
        ],
    )
    for key in segments:
        crawl, segment = key.split("/")
        part = {"benchmark": BENCHMARK, "crawl": crawl, "segment": segment}
        _write(lakehouse, QUARANTINE_MATCHES, part, [])
        _write(
            lakehouse,
            QUARANTINE_SCREENINGS,
            part,
            [
                {
                    **part,
                    "documents_checked": 1,
                    "contaminated_documents": 0,
                    "matches": 0,
                    "screened_at": datetime.now(UTC),
                    "dagster_run_id": "test-run",
                }
            ],
        )


def run_checks(lakehouse: Lakehouse, run_view_id: str) -> dict[str, bool]:
    """The four blocking checks, evaluated with the same functions the asset checks call."""
    row = store.load_manifest(lakehouse, run_view_id)
    m = row["manifest"]
    return {
        "non_empty": not store.check_non_empty(m),
        "checksums_verified": not store.check_checksums(lakehouse, run_view_id, m)[1],
        "shares_within_tolerance": not store.check_shares(m),
        "quarantine_clean": not store.check_quarantine(lakehouse, run_view_id, m),
    }


def spec(name: str = "test", seed: int = 0, seq_len: int = 64, components=None, **kw) -> store.RunViewSpec:
    return store.RunViewSpec(
        name=name, tokenizer="gpt2", seed=seed, seq_len=seq_len, components=components or [Component("all", 1.0)], **kw
    )


def candidate(lakehouse: Lakehouse, **spec_kw) -> store.CandidateResult:
    return store.build_candidate(lakehouse, spec(**spec_kw), provenance("run_view/candidate"))


def publish(lakehouse: Lakehouse, result: store.CandidateResult, reviewer: str = "test-reviewer") -> dict:
    return store.decide(
        lakehouse,
        result.run_view_id,
        result.manifest_sha256,
        reviewer,
        "approve",
        "ok",
        run_checks(lakehouse, result.run_view_id),
        provenance("run_view/manifests"),
    )


def published_view(
    n_docs: int = 60, seq_len: int = 64, seed: int = 0, docs_per_row_group: int = 8, name: str = "test", **spec_kw
) -> str:
    """In the current TOKENLAKE_HOME: documents, screening, a candidate, approval. Returns the run view id."""
    lakehouse = Lakehouse()
    if lakehouse.snapshot_id(TOKENIZED_DOCUMENTS) is None:
        write_documents(lakehouse, n_docs=n_docs, docs_per_row_group=docs_per_row_group)
        screen(lakehouse)
    result = candidate(lakehouse, name=name, seed=seed, seq_len=seq_len, **spec_kw)
    publish(lakehouse, result)
    return result.run_view_id
