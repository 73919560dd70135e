"""Deletion propagation: from a resolved request to rows deleted everywhere, views superseded, bytes gone.
No Dagster; the steps and why they are in that order are in README.md."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pyiceberg.expressions import AlwaysFalse, In

from assets.governance.requests import LineageKeys, load_request, policy_version_of, resolve
from assets.run_view import store
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.commit import POLICY_VERSION, carried_policy_versions
from iceberg_catalog.erasure import ERASURE_KEY, LINEAGE_COLUMNS
from iceberg_catalog.keyed_rows import put_row
from iceberg_catalog.maintenance import (
    count_matching_in_retained_snapshots,
    erase_rows,
    refs_reading_rows,
    remove_refs,
)
from iceberg_catalog.run_view_contract import TAG_PREFIX, tag_name
from iceberg_catalog.schemas import GOVERNANCE_DELETION_REQUESTS, RUN_VIEW_SAMPLES, TABLES, TableDef

log = logging.getLogger(__name__)


class ErasureCoverageError(RuntimeError):
    """An asset downstream of raw declares no way to delete its rows: propagation refuses to start."""


@dataclass(frozen=True)
class ErasureTarget:
    asset_key: str
    table: TableDef
    columns: tuple[str, ...]


def plan(declarations: Mapping[str, Mapping | None]) -> list[ErasureTarget]:
    """Erasure targets from {asset key: its declaration or None}; refuses any asset without a valid one."""
    missing = sorted(k for k, d in declarations.items() if not d)
    if missing:
        raise ErasureCoverageError(
            f"deletion propagation refused: {missing} downstream of raw declare no erasure (asset metadata "
            f"{ERASURE_KEY!r}, see iceberg_catalog.erasure.erasure); nothing was deleted"
        )
    targets: dict[str, ErasureTarget] = {}
    for key, decl in sorted(declarations.items()):
        for entry in decl["tables"]:
            ident, columns = entry["table"], tuple(entry["columns"])
            if ident not in TABLES:
                raise ErasureCoverageError(f"{key} declares erasure of unknown table {ident!r}")
            names = {f.name for f in TABLES[ident].schema.fields}
            bad = [c for c in columns if c not in LINEAGE_COLUMNS or c not in names]
            if bad or not columns:
                raise ErasureCoverageError(
                    f"{key}: table {ident} cannot be matched on {bad or 'no column'}; lineage "
                    f"columns are {LINEAGE_COLUMNS} and must exist in the table"
                )
            targets.setdefault(ident, ErasureTarget(key, TABLES[ident], columns))
    return [targets[ident] for ident in sorted(targets)]


def _affected_views(
    lakehouse: Lakehouse, targets: Sequence[ErasureTarget], keys: LineageKeys
) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """Published views whose tagged snapshots read matching rows ({view: {table: rows}}), and candidate views
    whose samples hold an affected document ({view: samples})."""
    published: dict[str, dict[str, int]] = {}
    for t in targets:
        pred = keys.predicate(t.columns)
        tagged = {
            name: ref.snapshot_id
            for name, ref in lakehouse.table(t.table).refs().items()
            if name.startswith(TAG_PREFIX)
        }
        for name, sid in tagged.items():
            n = sum(b.num_rows for b in lakehouse.batches_at(t.table, sid, t.columns[:1], pred))
            if n:
                published.setdefault(name[len(TAG_PREFIX) :], {})[t.table.identifier] = n
    candidates: dict[str, int] = {}
    if keys.doc_id:
        rows = lakehouse.scan(RUN_VIEW_SAMPLES, ("run_view_id",), In("doc_id", sorted(keys.doc_id)))
        for rv in rows["run_view_id"].to_pylist():
            candidates[rv] = candidates.get(rv, 0) + 1
    statuses = {r["run_view_id"]: r["status"] for r in store.list_run_views(lakehouse)}
    candidates = {rv: n for rv, n in candidates.items() if statuses.get(rv) == "candidate"}
    published = {rv: t for rv, t in published.items() if statuses.get(rv) == "published"}
    return published, candidates


def _erase_table(
    lakehouse: Lakehouse, t: ErasureTarget, keys: LineageKeys, tags: Sequence[str], props: Provenance
) -> dict:
    """Delete the matching rows of one table, drop the superseded views' tags, expire, sweep; then prove 0
    matching rows in every retained snapshot. Commits nothing when there is nothing to do."""
    table = lakehouse.table(t.table)
    pred = keys.predicate(t.columns)
    counts = count_matching_in_retained_snapshots(table, pred) if not keys.empty() else {}
    present = [n for n in tags if n in table.refs()]
    if not any(counts.values()) and not present:
        return {
            "rows_deleted": 0,
            "snapshots_expired": 0,
            "files_removed": 0,
            "refs_removed": [],
            "matching_rows_in_retained_snapshots": 0,
            "retained_snapshots_scanned": len(counts),
        }
    report = erase_rows(
        table,
        pred if not isinstance(pred, AlwaysFalse) else None,
        {**props.snapshot_properties(), **carried_policy_versions(table)},  # the history it expires named them
        refs=present,
        catalog_fingerprint=lakehouse.lock_key,
    )
    proof = count_matching_in_retained_snapshots(lakehouse.table(t.table), pred)
    return {
        "rows_deleted": report.rows_deleted,
        "snapshots_expired": len(report.snapshots_expired),
        "files_removed": len(report.files_removed),
        "refs_removed": list(report.refs_removed),
        "matching_rows_in_retained_snapshots": sum(proof.values()),
        "retained_snapshots_scanned": len(proof),
        "blocking_refs": refs_reading_rows(lakehouse.table(t.table), proof),
    }


def propagate(lakehouse: Lakehouse, request_id: str, targets: Sequence[ErasureTarget], provenance: Provenance) -> dict:
    """Carry out one deletion request end to end; returns its deletion report (also stored on the request).
    Running it again finds nothing to delete and commits nothing to any data table."""
    request = load_request(lakehouse, request_id)
    if request is None:
        raise KeyError(f"unknown deletion request {request_id!r}")
    keys = resolve(lakehouse, request["key_type"], request["value"])
    log.info(
        "%s reaches %d records, %d deletion keys, %d documents",
        request_id,
        len(keys.record_id),
        len(keys.deletion_key),
        len(keys.doc_id),
    )
    props = Provenance(
        provenance.asset_key,
        request_id,
        provenance.run_id,
        provenance.code_version,
        provenance.config_hash,
        {},
        {**provenance.extra, "deletion-request-id": request_id, **_policy_stamp(request)},
    )
    published, candidates = _affected_views(lakehouse, targets, keys) if not keys.empty() else ({}, {})
    superseded = sorted(published) + sorted(candidates)
    for rv in superseded:
        store.set_status(lakehouse, rv, props, status="superseded", superseded_by_request=request_id)
    tags = [tag_name(rv) for rv in sorted(published)]
    tables = {t.table.identifier: _erase_table(lakehouse, t, keys, tags, props) for t in targets}
    # the other tables a superseded view pinned (tokenizers, eval items, ...) lose its tag too
    for ident, t in TABLES.items():
        if ident not in tables and tags:
            remove_refs(lakehouse.table(t), tags, catalog_fingerprint=lakehouse.lock_key)
    report = {
        "request_id": request_id,
        "key_type": request["key_type"],
        "value": request["value"],
        "lineage_keys": {c: len(v) for c, v in keys.as_dict().items()},
        "doc_ids": keys.as_dict()["doc_id"][:100],
        "tables": tables,
        "superseded_run_views": superseded,
        "rows_deleted": sum(t["rows_deleted"] for t in tables.values()),
        "erased": all(t["matching_rows_in_retained_snapshots"] == 0 for t in tables.values()),
    }
    done = {
        **request,
        "status": "completed",
        "completed_at": datetime.now(UTC),
        "propagated_by_run_id": provenance.run_id,
        "report_json": json.dumps(report, sort_keys=True),
    }
    if request["status"] != "completed":
        put_row(lakehouse, GOVERNANCE_DELETION_REQUESTS, done, props)
    return report


def _policy_stamp(request: Mapping) -> dict[str, str]:
    """A request filed by a standing rule of the deletion policy: its snapshots name that version."""
    label = policy_version_of(request)
    return {POLICY_VERSION: label} if label else {}


def superseded_without_successor(lakehouse: Lakehouse) -> list[str]:
    """Published-then-superseded views that no candidate names in `supersedes` yet (to rebuild)."""
    views = store.list_run_views(lakehouse)
    rebuilt = {r["supersedes"] for r in views if r["supersedes"]}
    # a reviewer on the row means it had been published: superseded candidates are not rebuilt
    return sorted(
        r["run_view_id"]
        for r in views
        if r["status"] == "superseded"
        and r["superseded_by_request"]
        and r["reviewer"]
        and r["run_view_id"] not in rebuilt
    )
