"""Provenance of a document, from WARC bytes to training steps. No Dagster.

`provenance(lakehouse, doc_id=... | url=...)` follows the lineage keys through every state: the raw record
(WARC file, byte offset, collection time, licence basis), the curated decision and its signals, duplicate and
quarantine decisions, the token arrays per tokenizer, and every run view that selected the document, with
the global steps at which the loader serves it in a published view (for a given global batch size).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from pyiceberg.expressions import EqualTo, In

from assets.governance.policies import decided_by
from assets.raw.urls import deletion_key
from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_NEAR_DUPLICATES,
    QUARANTINE_MATCHES,
    RAW_WARC_RECORDS,
    RUN_VIEW_MANIFESTS,
    RUN_VIEW_SAMPLES,
    TOKENIZED_DOCUMENTS,
)

RAW_FIELDS = (
    "record_id",
    "deletion_key",
    "crawl",
    "segment",
    "target_uri",
    "warc_file",
    "warc_offset",
    "warc_length",
    "warc_date",
    "licence_basis",
    "payload_sha1",
    "payload_length",
    "http_status",
)
CURATED_FIELDS = (
    "doc_id",
    "record_id",
    "crawl",
    "segment",
    "url",
    "kept",
    "decision",
    "decision_detail",
    "language",
    "language_score",
    "perplexity",
    "ppl_bucket",
)
TOKEN_FIELDS = ("tokenizer_id", "doc_id", "crawl", "segment", "n_tokens", "tokens_sha256")


def _iso(row: dict) -> dict:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}


def provenance(
    lakehouse: Lakehouse,
    doc_id: str | None = None,
    url: str | None = None,
    global_batch_size: int | None = None,
    epochs: Sequence[int] = (0,),
) -> list[dict]:
    """One entry per matching document (a URL can have several, e.g. one per crawl)."""
    if (doc_id is None) == (url is None):
        raise ValueError("give exactly one of doc_id or url")
    where = EqualTo("doc_id", doc_id) if doc_id is not None else EqualTo("deletion_key", deletion_key(url))
    docs = lakehouse.scan(CURATED_DOCUMENTS, CURATED_FIELDS, where).to_pylist()
    return [
        document_provenance(lakehouse, doc, global_batch_size, epochs)
        for doc in sorted(docs, key=lambda d: (d["crawl"], d["doc_id"]))
    ]


def document_provenance(lakehouse: Lakehouse, doc: dict, global_batch_size: int | None, epochs: Sequence[int]) -> dict:
    did = doc["doc_id"]

    def rows(t, columns, where=EqualTo("doc_id", did)) -> list[dict]:
        return lakehouse.scan(t, columns, where).to_pylist()

    raw = rows(RAW_WARC_RECORDS, RAW_FIELDS, EqualTo("record_id", doc["record_id"]))
    exact = rows(CURATED_EXACT_DUPLICATES, ("decision", "duplicate_of"))
    near = rows(DEDUP_NEAR_DUPLICATES, ("decision", "cluster_id", "cluster_size", "duplicate_of"))
    matches = rows(QUARANTINE_MATCHES, ("benchmark", "item_id", "kind", "overlap_fraction"))
    tokens = rows(TOKENIZED_DOCUMENTS, TOKEN_FIELDS)
    samples = rows(RUN_VIEW_SAMPLES, ("run_view_id", "sample_index", "repetition", "component"))
    views = []
    statuses = {}
    if samples:
        for r in rows(
            RUN_VIEW_MANIFESTS,
            ("run_view_id", "status", "reviewer", "superseded_by_request", "manifest_json"),
            In("run_view_id", sorted({s["run_view_id"] for s in samples})),
        ):
            policy = json.loads(r.pop("manifest_json")).get("policy") or {}
            statuses[r["run_view_id"]] = {**r, "mixture_policy_version": policy.get("version", "unstamped")}
    for rv_id in sorted({s["run_view_id"] for s in samples}):
        mine = sorted((s for s in samples if s["run_view_id"] == rv_id), key=lambda s: s["sample_index"])
        entry = {
            "run_view_id": rv_id,
            **{k: v for k, v in statuses.get(rv_id, {}).items() if k != "run_view_id"},
            "samples": [{k: s[k] for k in ("sample_index", "repetition", "component")} for s in mine],
        }
        if global_batch_size and entry.get("status") == "published":
            entry["global_batch_size"] = global_batch_size
            entry["served_at"] = served_steps(lakehouse, rv_id, did, global_batch_size, epochs)
        views.append(entry)
    return {
        "doc_id": did,
        "raw_record": _iso(raw[0]) if raw else None,
        "curated": _iso(doc),
        "decided_by_policy": decided_by(lakehouse, doc["crawl"], doc["segment"]),
        "exact_duplicate": exact[0] if exact else None,
        "near_duplicate": near[0] if near else None,
        "quarantine_matches": matches,
        "tokens": tokens,
        "run_views": views,
    }


def served_steps(
    lakehouse: Lakehouse, run_view_id: str, doc_id: str, global_batch_size: int, epochs: Sequence[int]
) -> list[dict]:
    """Where the loader serves the document: (epoch, global step, sequence, token span) per piece."""
    from loader import open_run_view, steps_serving  # torch: imported only where steps are asked for

    view = open_run_view(run_view_id, catalog=lakehouse)
    return [span._asdict() for span in steps_serving(view, doc_id, global_batch_size, epochs=tuple(epochs))]
