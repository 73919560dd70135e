"""Deletion requests: recorded in governance.deletion_requests, resolved to lineage keys. No Dagster.

A request names one key (a URL, a domain, a deletion key, a WARC record id or a document id). Resolution
turns it into the three lineage keys every derived row carries: `record_id` and `deletion_key` (from raw) and
`doc_id` (from curated and tokenized), read at the current snapshots, before anything is deleted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysFalse, AlwaysTrue, BooleanExpression, EqualTo, In, Or

from assets.raw.urls import deletion_key, normalise_url
from iceberg_catalog import TABLES, PartitionWriter, Provenance
from iceberg_catalog.catalog import load_table

KEY_TYPES = ("url", "domain", "deletion_key", "record_id", "doc_id")
LINEAGE_COLUMNS = ("record_id", "deletion_key", "doc_id")


@dataclass(frozen=True)
class DeletionRequest:
    key_type: str
    value: str
    reason: str
    requested_by: str
    requested_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    def __post_init__(self) -> None:
        if self.key_type not in KEY_TYPES:
            raise ValueError(f"key_type must be one of {KEY_TYPES}, got {self.key_type!r}")
        if not self.value.strip():
            raise ValueError(f"a {self.key_type} deletion request needs a value")
        if not self.requested_by.strip() or not self.reason.strip():
            raise ValueError("a deletion request needs a reason and who requested it (requested_by)")

    @property
    def request_id(self) -> str:
        """Stable for the same request made at the same time: `del-` + 16 hex digits."""
        blob = json.dumps([self.key_type, self.value, self.reason, self.requested_by, self.requested_at.isoformat()])
        return "del-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class LineageKeys:
    """The lineage key values a request reaches."""

    record_id: frozenset[str] = frozenset()
    deletion_key: frozenset[str] = frozenset()
    doc_id: frozenset[str] = frozenset()

    def empty(self) -> bool:
        return not (self.record_id or self.deletion_key or self.doc_id)

    def predicate(self, columns: Iterable[str]) -> BooleanExpression:
        """Rows whose value in any of `columns` is one of these keys (AlwaysFalse when none applies)."""
        expr: BooleanExpression = AlwaysFalse()
        for column in columns:
            values = getattr(self, column)
            if values:
                term = In(column, sorted(values))
                expr = term if isinstance(expr, AlwaysFalse) else Or(expr, term)
        return expr

    def as_dict(self) -> dict[str, list[str]]:
        return {c: sorted(getattr(self, c)) for c in LINEAGE_COLUMNS}


def record(catalog: Catalog, request: DeletionRequest, provenance: Provenance, catalog_fingerprint: str = "") -> str:
    """Write the request as `pending` (idempotent for the same request id); returns the request id."""
    rid = request.request_id
    existing = load_request(catalog, rid)
    if existing is not None:
        return rid
    write_request_row(catalog, {
        "request_id": rid, "key_type": request.key_type, "value": request.value, "reason": request.reason,
        "requested_by": request.requested_by, "requested_at": request.requested_at, "status": "pending",
        "completed_at": None, "propagated_by_run_id": None, "report_json": None}, provenance, catalog_fingerprint)
    return rid


def write_request_row(catalog: Catalog, row: Mapping, provenance: Provenance, catalog_fingerprint: str = "") -> None:
    writer = PartitionWriter(catalog, "governance.deletion_requests", {"request_id": row["request_id"]},
                             catalog_fingerprint=catalog_fingerprint)
    writer.write(pa.Table.from_pylist([dict(row)], schema=TABLES["governance.deletion_requests"].arrow_schema))
    writer.commit(provenance)


def load_request(catalog: Catalog, request_id: str) -> dict | None:
    table = load_table(catalog, "governance.deletion_requests")
    if table.current_snapshot() is None:
        return None
    rows = table.scan(row_filter=EqualTo("request_id", request_id)).to_arrow().to_pylist()
    return rows[0] if rows else None


def list_requests(catalog: Catalog, status: str | None = None) -> list[dict]:
    """Requests, oldest first (optionally only those with `status`)."""
    table = load_table(catalog, "governance.deletion_requests")
    if table.current_snapshot() is None:
        return []
    kwargs = {"row_filter": EqualTo("status", status)} if status else {}
    rows = table.scan(**kwargs).to_arrow().to_pylist()
    return sorted(rows, key=lambda r: r["requested_at"])


def _column(catalog: Catalog, ident: str, fields: tuple[str, ...], row_filter: BooleanExpression) -> pa.Table:
    table = load_table(catalog, ident)
    if table.current_snapshot() is None:
        return TABLES[ident].arrow_schema.empty_table().select(list(fields))
    return table.scan(row_filter=row_filter, selected_fields=fields).to_arrow()


def resolve(catalog: Catalog, key_type: str, value: str) -> LineageKeys:
    """The record ids, deletion keys and doc ids the request reaches in the current lakehouse."""
    value = value.strip()
    record_ids: set[str] = set()
    dkeys: set[str] = set()
    doc_ids: set[str] = set()
    if key_type == "url":
        dkeys.add(deletion_key(value))
    elif key_type == "deletion_key":
        dkeys.add(value)
    elif key_type == "record_id":
        record_ids.add(value)
    elif key_type == "doc_id":
        doc_ids.add(value)
        docs = _column(catalog, "curated.documents", ("record_id", "deletion_key"), EqualTo("doc_id", value))
        record_ids |= set(docs["record_id"].to_pylist())
        dkeys |= set(docs["deletion_key"].to_pylist())
    elif key_type == "domain":
        domain = normalise_url(f"http://{value.lower()}/").split("/")[2]
        raw = _column(catalog, "raw.warc_records", ("record_id", "deletion_key", "host"), AlwaysTrue())
        hosts = pc.fill_null(raw["host"], "")
        mask = pc.or_(pc.equal(hosts, domain), pc.ends_with(hosts, "." + domain))
        record_ids |= set(raw.filter(mask)["record_id"].to_pylist())
        dkeys |= set(raw.filter(mask)["deletion_key"].to_pylist())
    else:
        raise ValueError(f"key_type must be one of {KEY_TYPES}, got {key_type!r}")
    # close over raw: every record of those keys, every key of those records
    if record_ids or dkeys:
        expr = LineageKeys(frozenset(record_ids), frozenset(dkeys)).predicate(("record_id", "deletion_key"))
        raw = _column(catalog, "raw.warc_records", ("record_id", "deletion_key"), expr)
        record_ids |= set(raw["record_id"].to_pylist())
        dkeys |= set(raw["deletion_key"].to_pylist())
    keys = LineageKeys(frozenset(record_ids), frozenset(dkeys), frozenset(doc_ids))
    for ident in ("curated.documents", "tokenized.documents"):
        docs = _column(catalog, ident, ("doc_id",), keys.predicate(LINEAGE_COLUMNS))
        doc_ids |= set(docs["doc_id"].to_pylist())
    return LineageKeys(frozenset(record_ids), frozenset(dkeys), frozenset(doc_ids))
