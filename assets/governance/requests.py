"""Deletion requests: recorded in governance.deletion_requests, resolved to lineage keys. No Dagster.

A request names one key; resolution turns it into the lineage keys every derived row carries (README.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysFalse, BooleanExpression, EqualTo, In, Or

from assets.raw.urls import deletion_key, normalise_url
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.erasure import LINEAGE_COLUMNS
from iceberg_catalog.keyed_rows import get_row, put_row
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    GOVERNANCE_DELETION_REQUESTS,
    RAW_WARC_RECORDS,
    TABLES,
    TOKENIZED_DOCUMENTS,
)

KEY_TYPES = ("url", "domain", "deletion_key", "record_id", "doc_id")
POLICY_REQUESTER = "policy:"  # requested_by of a request filed by a standing rule: `policy:deletion/<n>`


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
    put_row(
        lakehouse,
        GOVERNANCE_DELETION_REQUESTS,
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


def load_request(lakehouse: Lakehouse, request_id: str) -> dict | None:
    """The request's row (None for an unknown id)."""
    return get_row(lakehouse, GOVERNANCE_DELETION_REQUESTS, request_id)


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


def policy_version_of(request: Mapping) -> str | None:
    """The deletion policy version (`deletion/<n>`) whose standing rule filed a request; None for a person's."""
    who = request["requested_by"]
    return who[len(POLICY_REQUESTER) :] if who.startswith(POLICY_REQUESTER) else None


def union(keys: Iterable[LineageKeys]) -> LineageKeys:
    out = LineageKeys()
    for k in keys:
        out = LineageKeys(out.record_id | k.record_id, out.deletion_key | k.deletion_key, out.doc_id | k.doc_id)
    return out


def erasable_tables() -> list[tuple]:
    """(table, its lineage columns) for every table holding one: the tables a deletion reaches (the asset graph
    declares erasure on exactly these columns; propagate.plan checks the declarations)."""
    out = []
    for ident in sorted(TABLES):
        columns = tuple(c for c in LINEAGE_COLUMNS if c in TABLES[ident].arrow_schema.names)
        if columns:
            out.append((TABLES[ident], columns))
    return out


def reach(lakehouse: Lakehouse, rules: Sequence[Mapping]) -> dict:
    """What standing deletion rules reach now, as a request for each would resolve it: per rule its rows per
    table; all rules together (rows per table, doc ids), counting a row reached by two rules once."""
    per_rule, all_keys = [], []
    for rule in rules:
        keys = resolve(lakehouse, rule["key_type"], rule["value"])
        all_keys.append(keys)
        per_rule.append({**rule, "rows": _rows(lakehouse, keys)})
    keys = union(all_keys)
    rows = _rows(lakehouse, keys)
    return {"rules": per_rule, "rows": rows, "total_rows": sum(rows.values()), "doc_ids": sorted(keys.doc_id)}


def _rows(lakehouse: Lakehouse, keys: LineageKeys) -> dict[str, int]:
    if keys.empty():
        return {t.identifier: 0 for t, _ in erasable_tables()}
    return {
        t.identifier: lakehouse.scan(t, columns[:1], keys.predicate(columns)).num_rows
        for t, columns in erasable_tables()
    }


def file_standing_rules(
    lakehouse: Lakehouse, label: str, rules: Sequence[Mapping], provenance: Provenance
) -> list[str]:
    """Record a pending deletion request (requested_by `policy:<label>`) for each standing rule of the deletion
    policy version `label` that reaches any row now; the deletion_requests sensor (or `tokenlake proposals
    apply`) propagates them. Returns the request ids."""
    out = []
    for rule in rules:
        if not sum(_rows(lakehouse, resolve(lakehouse, rule["key_type"], rule["value"])).values()):
            continue
        reason = f"{rule.get('reason') or 'standing rule'} (standing rule of {label})"
        out.append(
            record(
                lakehouse,
                DeletionRequest(rule["key_type"], rule["value"], reason, POLICY_REQUESTER + label),
                provenance,
            )
        )
    return out
