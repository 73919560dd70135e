"""Governance jobs: record a deletion request, propagate it through the asset graph.

`request_deletion` (Launchpad or `tokenlake delete`) writes a pending row to governance.deletion_requests;
the `deletion_requests` sensor launches `propagate_deletion` for it, which walks the asset graph downstream
of raw (the graph this code location defines, not a list), refuses if any asset there declares no erasure,
then deletes, supersedes, expires, sweeps and proves (assets.governance.propagate).

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import dagster as dg

from assets.governance import propagate as prop
from assets.governance.requests import DeletionRequest, record
from assets.lakehouse import md_table
from assets.raw.defs import REJECTED_RECORDS, WARC_RECORDS
from iceberg_catalog import Provenance, config_hash
from resources import AssetGraphSource, IcebergCatalogResource

CODE_VERSION = "governance-1"


class DeletionRequestConfig(dg.Config):
    """key_type: url | domain | deletion_key | record_id | doc_id."""

    key_type: str
    value: str
    reason: str
    requested_by: str


@dg.op(description="Record a deletion request (status pending); the deletion_requests sensor propagates it.")
def record_deletion_request(context: dg.OpExecutionContext, config: DeletionRequestConfig,
                            catalog: IcebergCatalogResource) -> str:
    try:
        request = DeletionRequest(config.key_type, config.value, config.reason, config.requested_by)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    prov = Provenance("governance/deletion_requests", request.request_id, context.run_id, CODE_VERSION,
                      config_hash(config.model_dump()))
    rid = record(catalog.catalog(), request, prov, catalog.config.fingerprint())
    context.log.info("deletion request %s: %s %s", rid, config.key_type, config.value)
    context.add_output_metadata({"request_id": rid, "key_type": config.key_type})
    return rid


@dg.job(description="Record a deletion request: a takedown, an opt-out or a licence withdrawal.",
        tags={"tokenlake/gate": "governance"},
        executor_def=dg.in_process_executor)
def request_deletion():
    record_deletion_request()


def erasure_declarations(asset_graph) -> dict[str, dict | None]:
    """{asset key: its erasure declaration or None} for every asset downstream of raw, both raw tables included."""
    keys = dg.AssetSelection.assets(WARC_RECORDS, REJECTED_RECORDS).downstream().resolve(asset_graph)
    out = {}
    for key in keys:
        value = asset_graph.get(key).metadata.get(prop.ERASURE_KEY)
        out[key.to_user_string()] = getattr(value, "value", value)
    return out


class PropagationConfig(dg.Config):
    request_id: str


@dg.op(name="propagate", description="Propagate one deletion request through every table downstream of raw and prove erasure.")
def propagate_deletion(context: dg.OpExecutionContext, config: PropagationConfig, catalog: IcebergCatalogResource,
                       lineage: dg.ResourceParam[AssetGraphSource]) -> dict:
    try:
        targets = prop.plan(erasure_declarations(lineage.asset_graph()))
    except prop.ErasureCoverageError as exc:
        raise dg.Failure(description=str(exc)) from exc
    context.log.info("erasure targets: %s", [t.table for t in targets])
    prov = Provenance("governance/propagate_deletion", config.request_id, context.run_id, CODE_VERSION,
                      config_hash(config.model_dump()))
    report = prop.propagate(catalog.catalog(), config.request_id, targets, prov, catalog.config.fingerprint())
    context.log.info("%s: %d rows deleted, run views superseded %s, erased=%s", config.request_id,
                     report["rows_deleted"], report["superseded_run_views"], report["erased"])
    if not report["erased"]:
        raise dg.Failure(description=f"{config.request_id}: matching rows remain in retained snapshots",
                         metadata={"report": dg.MetadataValue.json(report)})
    context.add_output_metadata({
        "request_id": config.request_id,
        "rows_deleted": report["rows_deleted"],
        "superseded_run_views": dg.MetadataValue.json(report["superseded_run_views"]),
        "deletion_report": md_table(
            ["table", "rows deleted", "snapshots expired", "files removed", "matching rows in retained snapshots",
             "snapshots scanned"],
            [[t, r["rows_deleted"], r["snapshots_expired"], r["files_removed"],
              r["matching_rows_in_retained_snapshots"], r["retained_snapshots_scanned"]]
             for t, r in sorted(report["tables"].items())]),
        "report": dg.MetadataValue.json(report),
    })
    return report


@dg.job(name="propagate_deletion", description="Carry out a deletion request: delete matching rows downstream of raw, supersede affected "
                    "run views, expire snapshots, sweep files, prove 0 rows remain. Started by the "
                    "deletion_requests sensor.", tags={"tokenlake/gate": "governance"},
        executor_def=dg.in_process_executor)
def propagate_deletion_job():
    propagate_deletion()


jobs = [request_deletion, propagate_deletion_job]
