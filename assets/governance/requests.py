"""Deletion requests: recorded in governance.deletion_requests, resolved to lineage keys. No Dagster.

A request names one key; resolution turns it into the lineage keys every derived row carries (README.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysFalse, BooleanExpression, EqualTo, In, Or

from assets.raw.urls import deletion_key, normalise_url
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.erasure import LINEAGE_COLUMNS
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    GOVERNANCE_DELETION_REQUESTS,
    RAW_WARC_RECORDS,
    TOKENIZED_DOCUMENTS,
)

KEY_TYPES = ("url", "domain", "deletion_key", "record_id", "doc_id")


@dataclass(frozen=True)
class DeletionRequest:
    key_type: str
    value: str
    reason: str
    requested_by: str
    requested_at: datetime = field(default_factory=lambda: datetime.now(UTC))

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


def record(lakehouse: Lakehouse, request: DeletionRequest, provenance: Provenance) -> str:
    """Write the request as `pending` (idempotent for the same request id); returns the request id."""
    rid = request.request_id
    if load_request(lakehouse, rid) is not None:
        return rid
    write_request_row(
        lakehouse,
        {
            "request_id": rid,
            "key_type": request.key_type,
            "value": request.value,
            "reason": request.reason,
            "requested_by": request.requested_by,
            "requested_at": request.requested_at,
            "status": "pending",
            "completed_at": None,
            "propagated_by_run_id": None,
            "report_json": None,
        },
        provenance,
    )
    return rid


def write_request_row(lakehouse: Lakehouse, row: Mapping, provenance: Provenance) -> None:
    writer = lakehouse.writer(GOVERNANCE_DELETION_REQUESTS, {"request_id": row["request_id"]})
    writer.write(pa.Table.from_pylist([dict(row)], schema=GOVERNANCE_DELETION_REQUESTS.arrow_schema))
    writer.commit(provenance)


def load_request(lakehouse: Lakehouse, request_id: str) -> dict | None:
    rows = lakehouse.scan(GOVERNANCE_DELETION_REQUESTS, row_filter=EqualTo("request_id", request_id)).to_pylist()
    return rows[0] if rows else None


def list_requests(lakehouse: Lakehouse, status: str | None = None) -> list[dict]:
    """Requests, oldest first (optionally only those with `status`)."""
    rows = lakehouse.scan(GOVERNANCE_DELETION_REQUESTS, row_filter=EqualTo("status", status) if status else None)
    return sorted(rows.to_pylist(), key=lambda r: r["requested_at"])


def resolve(lakehouse: Lakehouse, key_type: str, value: str) -> LineageKeys:
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
        docs = lakehouse.scan(CURATED_DOCUMENTS, ("record_id", "deletion_key"), EqualTo("doc_id", value))
        record_ids |= set(docs["record_id"].to_pylist())
        dkeys |= set(docs["deletion_key"].to_pylist())
    elif key_type == "domain":
        domain = normalise_url(f"http://{value.lower()}/").split("/")[2]
        raw = lakehouse.scan(RAW_WARC_RECORDS, ("record_id", "deletion_key", "host"))
        hosts = pc.fill_null(raw["host"], "")
        mask = pc.or_(pc.equal(hosts, domain), pc.ends_with(hosts, "." + domain))
        record_ids |= set(raw.filter(mask)["record_id"].to_pylist())
        dkeys |= set(raw.filter(mask)["deletion_key"].to_pylist())
    else:
        raise ValueError(f"key_type must be one of {KEY_TYPES}, got {key_type!r}")
    # close over raw: every record of those keys, every key of those records
    if record_ids or dkeys:
        expr = LineageKeys(frozenset(record_ids), frozenset(dkeys)).predicate(("record_id", "deletion_key"))
        raw = lakehouse.scan(RAW_WARC_RECORDS, ("record_id", "deletion_key"), expr)
        record_ids |= set(raw["record_id"].to_pylist())
        dkeys |= set(raw["deletion_key"].to_pylist())
    keys = LineageKeys(frozenset(record_ids), frozenset(dkeys), frozenset(doc_ids))
    for t in (CURATED_DOCUMENTS, TOKENIZED_DOCUMENTS):
        doc_ids |= set(lakehouse.scan(t, ("doc_id",), keys.predicate(LINEAGE_COLUMNS))["doc_id"].to_pylist())
    return LineageKeys(frozenset(record_ids), frozenset(dkeys), frozenset(doc_ids))
