"""A generated lakehouse for run view builds at any size: tokenized documents and every table a candidate reads,
rows written straight into an embedded catalog (no WARC pipeline), deterministic in (n_docs, segments).

Document i of n lies in segment i % segments of crawl (i % segments) % 2; its token count follows a long tail
(20 to ~8,000 tokens); its labels (language, ppl_bucket, host, domain class and confidence) come from its
number. About 8% of documents are not kept, 2% exact duplicates, 4% near-duplicate rows (half canonical), 0.5%
contaminated by the one benchmark; the first segment is left unscreened (a missing quarantine pair). Token
arrays are two bytes each: a candidate build reads `n_tokens` and `tokens_sha256`, never the tokens.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from assets.run_view.mixture import Component
from iceberg_catalog import Lakehouse, Provenance, TableDef
from iceberg_catalog import schemas as T

TOKENIZER = "generated"
TOKENIZER_ID = hashlib.sha256(b"generated tokenizer").hexdigest()
BENCHMARK = "genbench"
LANGUAGES = ("en", "en", "en", "de", "fr", "es")
BUCKETS = ("head", "middle", "tail")
DOMAINS = ("news", "encyclopedic", "forum/qa", "code", "commerce", "other")
# a mixture with every kind of fill (null budget): en and rest partial passes, code four full passes
MIXTURE = (
    Component("en", 0.5, {"language": ["en"]}, 1),
    Component("code", 0.3, {"domain_class": ["code"], "min_domain_confidence": ["0.3"]}, 4),
    Component("rest", 0.2, {}, 2),
)


def _write(lakehouse: Lakehouse, t: TableDef, partition: dict, table: pa.Table) -> None:
    writer = lakehouse.writer(t, partition)
    writer.write(table)
    writer.commit(Provenance(t.identifier, None, "generated", "test", "test"))


def _table(t: TableDef, doc_ids: list[str], crawl: str, segment: str, **columns) -> pa.Table:
    """Rows of `t` for `doc_ids` of one segment; a column given as one value holds it on every row."""
    n = len(doc_ids)
    values = {"doc_id": doc_ids, "crawl": [crawl] * n, "segment": [segment] * n}
    values.update({k: v if isinstance(v, list) else [v] * n for k, v in columns.items()})
    return pa.table(values, t.arrow_schema)


def _picked(values: list, rows: list[int]) -> list:
    return [values[k] for k in rows]


def _with_nulls(t: TableDef, columns: dict, n: int) -> pa.Table:
    """`columns` as a table of `t`'s schema, every other (optional) column null."""
    schema = t.arrow_schema
    return pa.table({f.name: columns.get(f.name, pa.nulls(n, f.type)) for f in schema}, schema)


def documents(n_docs: int, segments: int, part: int) -> dict[str, np.ndarray | list]:
    """The columns of the documents of segment number `part` (as numpy arrays and lists)."""
    i = np.arange(part, n_docs, segments, dtype=np.int64)
    mix = (i * 2654435761) % (1 << 32)  # a cheap scramble of the number: labels not in lockstep with it
    doc_id = [hashlib.sha256(b"gen-%d" % k).hexdigest()[:32] for k in i.tolist()]
    n_tokens = 20 + (mix % 400) + np.where(mix % 10 == 0, (mix >> 8) % 7600, 0)
    return {
        "i": i,
        "mix": mix,
        "doc_id": doc_id,
        "n_tokens": n_tokens.astype(np.int32),
        "language": [LANGUAGES[k] for k in (mix % len(LANGUAGES)).tolist()],
        "ppl_bucket": [BUCKETS[k] for k in ((mix >> 3) % 3).tolist()],
        "host": [f"h{k}.example" for k in ((mix >> 5) % 997).tolist()],
        "domain_class": [DOMAINS[k] for k in ((mix >> 11) % len(DOMAINS)).tolist()],
        "domain_confidence": ((mix >> 13) % 1000) / 1000.0,
    }


def segment_key(part: int) -> tuple[str, str]:
    return f"CC-GEN-2024-{part % 2:02d}", f"seg-{part:04d}"


def write_lakehouse(lakehouse: Lakehouse, n_docs: int, segments: int = 4) -> None:
    """Every input table of a candidate build, `n_docs` documents over `segments` segments."""
    _write(
        lakehouse,
        T.TOKENIZED_TOKENIZERS,
        {"tokenizer_id": TOKENIZER_ID},
        pa.Table.from_pylist(
            [
                {
                    "tokenizer_id": TOKENIZER_ID,
                    "name": TOKENIZER,
                    "vocab_size": 50257,
                    "eos_id": 50256,
                    "token_dtype": "uint16",
                    "tokenizer_json": "{}",
                    "bos_id": None,
                }
            ],
            T.TOKENIZED_TOKENIZERS.arrow_schema,
        ),
    )
    _write(
        lakehouse,
        T.QUARANTINE_EVAL_ITEMS,
        {"benchmark": BENCHMARK},
        pa.Table.from_pylist(
            [{"benchmark": BENCHMARK, "split": "test", "item_id": "0", "text": "an item", "n_words": 2}],
            T.QUARANTINE_EVAL_ITEMS.arrow_schema,
        ),
    )
    exact: dict[str, list[pa.Table]] = {}
    near: dict[str, list[pa.Table]] = {}
    for part in range(segments):
        crawl, segment = segment_key(part)
        d = documents(n_docs, segments, part)
        n = len(d["doc_id"])
        ids = {
            "doc_id": d["doc_id"],
            "record_id": [f"<urn:uuid:{x}>" for x in d["doc_id"]],
            "deletion_key": [x * 2 for x in d["doc_id"]],
            "crawl": [crawl] * n,
            "segment": [segment] * n,
        }
        tokens = {
            "tokenizer_id": [TOKENIZER_ID] * n,
            **ids,
            "tokens": [b"\x01\x00"] * n,
            "token_dtype": ["uint16"] * n,
            "n_tokens": d["n_tokens"],
            "tokens_sha256": [hashlib.sha256(x.encode()).hexdigest() for x in d["doc_id"]],
            **{k: d[k] for k in ("language", "ppl_bucket", "host", "domain_class", "domain_confidence")},
        }
        key = {"tokenizer_id": TOKENIZER_ID, "crawl": crawl, "segment": segment}
        _write(lakehouse, T.TOKENIZED_DOCUMENTS, key, pa.table(tokens, T.TOKENIZED_DOCUMENTS.arrow_schema))
        curated = {**ids, "url": [f"https://x/{k}" for k in d["i"].tolist()], "kept": (d["mix"] % 13 != 0).tolist()}
        _write(
            lakehouse,
            T.CURATED_DOCUMENTS,
            {"crawl": crawl, "segment": segment},
            _with_nulls(T.CURATED_DOCUMENTS, curated, n),
        )
        rows = np.flatnonzero(d["mix"] % 50 == 7).tolist()
        exact_rows = {"decision": "exact_duplicate", "duplicate_of": "0" * 32, "text_sha256": "0" * 64}
        exact_rows["duplicate_of_crawl"] = crawl
        exact.setdefault(crawl, []).append(
            _table(T.CURATED_EXACT_DUPLICATES, _picked(d["doc_id"], rows), crawl, segment, **exact_rows)
        )
        rows = np.flatnonzero(d["mix"] % 25 == 3).tolist()
        near.setdefault(crawl, []).append(
            _table(
                T.DEDUP_NEAR_DUPLICATES,
                _picked(d["doc_id"], rows),
                crawl,
                segment,
                decision=[None if k % 2 else "near_duplicate" for k in rows],
                cluster_id=d["doc_id"][rows[0]] if rows else "",
                cluster_size=len(rows),
                duplicate_of=None,
                cluster_crawl=crawl,
            )
        )
        rows = np.flatnonzero(d["mix"] % 200 == 11).tolist()
        match = {"benchmark": BENCHMARK, "crawl": crawl, "segment": segment}
        contaminated = _table(
            T.QUARANTINE_MATCHES,
            _picked(d["doc_id"], rows),
            crawl,
            segment,
            benchmark=BENCHMARK,
            item_id="0",
            kind="ngram",
            overlap_fraction=1.0,
            char_start=0,
            char_end=1,
            decision="eval_contaminated",
            deletion_key=_picked(ids["deletion_key"], rows),
        )
        _write(lakehouse, T.QUARANTINE_MATCHES, match, contaminated)
        if part:  # the first segment stays unscreened: the report names the missing pair
            screened = {**match, "documents_checked": n, "contaminated_documents": len(rows), "matches": len(rows)}
            screened.update(screened_at=datetime(2024, 1, 1, tzinfo=UTC), dagster_run_id="generated")
            _write(
                lakehouse,
                T.QUARANTINE_SCREENINGS,
                match,
                pa.Table.from_pylist([screened], T.QUARANTINE_SCREENINGS.arrow_schema),
            )
    for crawl, tables in exact.items():
        _write(lakehouse, T.CURATED_EXACT_DUPLICATES, {"crawl": crawl}, pa.concat_tables(tables))
    for crawl, tables in near.items():
        _write(lakehouse, T.DEDUP_NEAR_DUPLICATES, {"crawl": crawl}, pa.concat_tables(tables))
