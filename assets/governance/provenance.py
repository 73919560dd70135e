"""Provenance of a document, from WARC bytes to training steps. No Dagster.

`provenance(catalog, doc_id=... | url=...)` follows the lineage keys through every state: the raw record
(WARC file, byte offset, collection time, licence basis), the curated decision and its signals, duplicate and
quarantine decisions, the token arrays per tokenizer, and every run view that selected the document, with
the global steps at which the loader serves it in a published view (for a given global batch size).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyiceberg.catalog import Catalog
from pyiceberg.expressions import EqualTo, In

from assets.raw.urls import deletion_key
from iceberg_catalog import TABLES
from iceberg_catalog.catalog import load_table

RAW_FIELDS = ("record_id", "deletion_key", "crawl", "segment", "target_uri", "warc_file", "warc_offset",
              "warc_length", "warc_date", "licence_basis", "payload_sha1", "payload_length", "http_status")
CURATED_FIELDS = ("doc_id", "record_id", "crawl", "segment", "url", "kept", "decision", "decision_detail",
                  "language", "language_score", "perplexity", "ppl_bucket")
TOKEN_FIELDS = ("tokenizer_id", "doc_id", "crawl", "segment", "n_tokens", "tokens_sha256")


def _rows(catalog: Catalog, ident: str, row_filter, fields: Sequence[str] | None = None) -> list[dict]:
    table = load_table(catalog, ident)
    if table.current_snapshot() is None:
        return []
    names = {f.name for f in TABLES[ident].schema.fields}
    kwargs = {"selected_fields": tuple(f for f in fields if f in names)} if fields else {}
    return table.scan(row_filter=row_filter, **kwargs).to_arrow().to_pylist()


def _iso(row: dict) -> dict:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


def provenance(catalog: Catalog, doc_id: str | None = None, url: str | None = None,
               global_batch_size: int | None = None, epochs: Sequence[int] = (0,)) -> list[dict]:
    """One entry per matching document (a URL can have several, e.g. one per crawl)."""
    if (doc_id is None) == (url is None):
        raise ValueError("give exactly one of doc_id or url")
    if doc_id is not None:
        docs = _rows(catalog, "curated.documents", EqualTo("doc_id", doc_id), CURATED_FIELDS)
    else:
        docs = _rows(catalog, "curated.documents", EqualTo("deletion_key", deletion_key(url)), CURATED_FIELDS)
    out = []
    for doc in sorted(docs, key=lambda d: (d["crawl"], d["doc_id"])):
        out.append(document_provenance(catalog, doc, global_batch_size, epochs))
    return out


def document_provenance(catalog: Catalog, doc: dict, global_batch_size: int | None, epochs: Sequence[int]) -> dict:
    did = doc["doc_id"]
    raw = _rows(catalog, "raw.warc_records", EqualTo("record_id", doc["record_id"]), RAW_FIELDS)
    exact = _rows(catalog, "curated.exact_duplicates", EqualTo("doc_id", did), ("decision", "duplicate_of"))
    near = _rows(catalog, "curated.near_duplicates", EqualTo("doc_id", did),
                 ("decision", "cluster_id", "cluster_size", "duplicate_of"))
    matches = _rows(catalog, "quarantine.matches", EqualTo("doc_id", did),
                    ("benchmark", "item_id", "kind", "overlap_fraction"))
    tokens = _rows(catalog, "tokenized.documents", EqualTo("doc_id", did), TOKEN_FIELDS)
    samples = _rows(catalog, "run_view.samples", EqualTo("doc_id", did),
                    ("run_view_id", "sample_index", "repetition", "component"))
    views = []
    statuses = {}
    if samples:
        for r in _rows(catalog, "run_view.manifests", In("run_view_id", sorted({s["run_view_id"] for s in samples})),
                       ("run_view_id", "status", "reviewer", "superseded_by_request")):
            statuses[r["run_view_id"]] = r
    for rv_id in sorted({s["run_view_id"] for s in samples}):
        mine = sorted((s for s in samples if s["run_view_id"] == rv_id), key=lambda s: s["sample_index"])
        entry = {"run_view_id": rv_id, **{k: v for k, v in statuses.get(rv_id, {}).items() if k != "run_view_id"},
                 "samples": [{k: s[k] for k in ("sample_index", "repetition", "component")} for s in mine]}
        if global_batch_size and entry.get("status") == "published":
            entry["global_batch_size"] = global_batch_size
            entry["served_at"] = served_steps(catalog, rv_id, did, global_batch_size, epochs)
        views.append(entry)
    return {
        "doc_id": did,
        "raw_record": _iso(raw[0]) if raw else None,
        "curated": _iso(doc),
        "exact_duplicate": exact[0] if exact else None,
        "near_duplicate": near[0] if near else None,
        "quarantine_matches": matches,
        "tokens": tokens,
        "run_views": views,
    }


def served_steps(catalog: Catalog, run_view_id: str, doc_id: str, global_batch_size: int,
                 epochs: Sequence[int]) -> list[dict]:
    """Where the loader serves the document: (epoch, global step, sequence, token span) per piece."""
    from loader import open_run_view, steps_serving

    view = open_run_view(run_view_id, catalog=catalog)
    return [span._asdict() for span in steps_serving(view, doc_id, global_batch_size, epochs=tuple(epochs))]
