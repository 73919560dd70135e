"""Governance: record a deletion request, propagate it through the asset graph, rebuild the run views it
superseded. See README.md.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import dagster as dg
import pydantic

from assets.governance import propagate as prop
from assets.governance.requests import KEY_TYPES, DeletionRequest, list_requests, record
from assets.raw.defs import REJECTED_RECORDS, WARC_RECORDS
from assets.shell import md_table
from iceberg_catalog import Provenance, config_hash
from iceberg_catalog.erasure import ERASURE_KEY
from iceberg_catalog.schemas import GOVERNANCE_DELETION_REQUESTS
from resources import AssetGraphSource, IcebergCatalogResource

CODE_VERSION = "governance-1"


class DeletionRequestConfig(dg.Config):
    """A takedown, an opt-out or a licence withdrawal: one key, why, and who asks."""

    key_type: str = pydantic.Field(description=f"What `value` is: {' | '.join(KEY_TYPES)}.")
    value: str = pydantic.Field(description="The URL, domain, deletion key, WARC record id or document id.")
    reason: str = pydantic.Field(description="Why the data must go (recorded with the request).")
    requested_by: str = pydantic.Field(description="Who asks (a person or a mailbox).")


@dg.op
def record_deletion_request(
    context: dg.OpExecutionContext, config: DeletionRequestConfig, catalog: IcebergCatalogResource
) -> str:
    """Record a deletion request (status pending); the deletion_requests sensor propagates it."""
    try:
        request = DeletionRequest(config.key_type, config.value, config.reason, config.requested_by)
    except ValueError as exc:
        raise dg.Failure(description=str(exc)) from exc
    prov = Provenance(
        "governance/deletion_requests",
        request.request_id,
        context.run_id,
        CODE_VERSION,
        config_hash(config.model_dump()),
    )
    rid = record(catalog.lakehouse(), request, prov)
    context.log.info("deletion request %s: %s %s", rid, config.key_type, config.value)
    context.add_output_metadata(
        {"request_id": rid, "key_type": config.key_type, "iceberg_table": GOVERNANCE_DELETION_REQUESTS.identifier}
    )
    return rid


@dg.job(tags={"tokenlake/gate": "governance"}, executor_def=dg.in_process_executor)
def request_deletion():
    """Record a deletion request: a takedown, an opt-out or a licence withdrawal."""
    record_deletion_request()


def erasure_declarations(asset_graph) -> dict[str, dict | None]:
    """{asset key: its erasure declaration or None} for every asset downstream of raw, both raw tables included."""
    keys = dg.AssetSelection.assets(WARC_RECORDS, REJECTED_RECORDS).downstream().resolve(asset_graph)
    out = {}
    for key in keys:
        value = asset_graph.get(key).metadata.get(ERASURE_KEY)
        out[key.to_user_string()] = getattr(value, "value", value)
    return out


class PropagationConfig(dg.Config):
    """The pending deletion request to carry out."""

    request_id: str = pydantic.Field(description="The request's id (`del-` + 16 hex digits).")


@dg.op(name="propagate")
def propagate_deletion(
    context: dg.OpExecutionContext,
    config: PropagationConfig,
    catalog: IcebergCatalogResource,
    lineage: dg.ResourceParam[AssetGraphSource],
) -> dict:
    """Propagate one deletion request through every table downstream of raw and prove erasure."""
    try:
        targets = prop.plan(erasure_declarations(lineage.asset_graph()))
    except prop.ErasureCoverageError as exc:
        raise dg.Failure(description=str(exc)) from exc
    context.log.info("erasure targets: %s", [t.table.identifier for t in targets])
    prov = Provenance(
        "governance/propagate_deletion",
        config.request_id,
        context.run_id,
        CODE_VERSION,
        config_hash(config.model_dump()),
    )
    report = prop.propagate(catalog.lakehouse(), config.request_id, targets, prov)
    context.log.info(
        "%s: %d rows deleted, run views superseded %s, erased=%s",
        config.request_id,
        report["rows_deleted"],
        report["superseded_run_views"],
        report["erased"],
    )
    if not report["erased"]:
        raise dg.Failure(
            description=f"{config.request_id}: matching rows remain in retained snapshots",
            metadata={"report": dg.MetadataValue.json(report)},
        )
    context.add_output_metadata(deletion_metadata(report))
    return report


def deletion_metadata(report: dict) -> dict:
    """The deletion report as the op's metadata: per table, what was deleted, expired, swept and proven."""
    return {
        "request_id": report["request_id"],
        "rows_deleted": report["rows_deleted"],
        "superseded_run_views": dg.MetadataValue.json(report["superseded_run_views"]),
        "deletion_report": md_table(
            [
                "table",
                "rows deleted",
                "snapshots expired",
                "files removed",
                "matching rows in retained snapshots",
                "snapshots scanned",
            ],
            [
                [
                    t,
                    r["rows_deleted"],
                    r["snapshots_expired"],
                    r["files_removed"],
                    r["matching_rows_in_retained_snapshots"],
                    r["retained_snapshots_scanned"],
                ]
                for t, r in sorted(report["tables"].items())
            ],
        ),
        "report": dg.MetadataValue.json(report),
    }


@dg.job(name="propagate_deletion", tags={"tokenlake/gate": "governance"}, executor_def=dg.in_process_executor)
def propagate_deletion_job():
    """Carry out a deletion request: delete matching rows downstream of raw, supersede affected run views,
    expire snapshots, sweep files, prove 0 rows remain. Started by the deletion_requests sensor."""
    propagate_deletion()


@dg.sensor(
    name="deletion_requests",
    job_name="propagate_deletion",  # by name: binding the op job object would re-create the sensor (beta warning)
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Starts propagate_deletion for every pending request in governance.deletion_requests (run key = "
    "request id, so each request is propagated once).",
)
def deletion_requests(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    pending = [r["request_id"] for r in list_requests(catalog.lakehouse(), status="pending")]
    if not pending:
        return dg.SkipReason("no pending deletion request")
    return [
        dg.RunRequest(
            run_key=rid,
            tags={"tokenlake/deletion-request": rid},
            run_config={"ops": {"propagate": {"config": {"request_id": rid}}}},
        )
        for rid in pending
    ]


@dg.sensor(
    name="superseded_run_views",
    job_name="run_view_candidate",  # the run_view state's job (governance does not import its definitions)
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="For each published run view superseded by a deletion, builds a new candidate with the same "
    "config on the current inputs (rebuild_of); it is published only after a reviewer approves it.",
)
def superseded_run_views(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    todo = prop.superseded_without_successor(catalog.lakehouse())
    if not todo:
        return dg.SkipReason("no superseded run view without a successor")
    return [
        dg.RunRequest(
            run_key=f"rebuild-{rv}",
            tags={"tokenlake/rebuild-of": rv},
            run_config={"ops": {"run_view__candidate": {"config": {"rebuild_of": rv}}}},
        )
        for rv in todo
    ]


defs = dg.Definitions(
    jobs=[request_deletion, propagate_deletion_job], sensors=[deletion_requests, superseded_run_views]
)
