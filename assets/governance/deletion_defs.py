"""Deletion in Dagster: record a request, propagate it through the asset graph, rebuild the run views it
superseded, and enforce the standing rules of the active deletion policy. See README.md.

No `from __future__ import annotations` in Dagster modules: Dagster reads config and resource types from the
runtime annotations."""

import dagster as dg
import pydantic

from assets.governance import policies
from assets.governance import propagate as prop
from assets.governance.proposal_defs import POLICY_CODE_VERSION  # the standing rules are policy, filed as such
from assets.governance.requests import (
    KEY_TYPES,
    DeletionRequest,
    file_standing_rules,
    list_requests,
    policy_version_of,
    reach,
    record,
)
from assets.governance.shell import gate_job, op_provenance, running_sensor
from assets.shell import md_table, table_key
from iceberg_catalog import Provenance
from iceberg_catalog.erasure import ERASURE_KEY
from iceberg_catalog.policy_store import sha256_hex
from iceberg_catalog.run_view_contract import canonical_json
from iceberg_catalog.schemas import GOVERNANCE_DELETION_REQUESTS, RAW_REJECTED_RECORDS, RAW_WARC_RECORDS
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
    prov = op_provenance(context, "governance/deletion_requests", request.request_id, CODE_VERSION, config)
    rid = record(catalog.lakehouse(), request, prov)
    context.log.info("deletion request %s: %s %s", rid, config.key_type, config.value)
    context.add_output_metadata(
        {"request_id": rid, "key_type": config.key_type, "iceberg_table": GOVERNANCE_DELETION_REQUESTS.identifier}
    )
    return rid


@gate_job("governance")
def request_deletion():
    """Record a deletion request: a takedown, an opt-out or a licence withdrawal."""
    record_deletion_request()


def erasure_declarations(asset_graph) -> dict[str, dict | None]:
    """{asset key: its erasure declaration or None} for every asset downstream of raw, both raw tables included."""
    raw = dg.AssetSelection.assets(table_key(RAW_WARC_RECORDS), table_key(RAW_REJECTED_RECORDS))
    out = {}
    for key in raw.downstream().resolve(asset_graph):
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
    prov = op_provenance(context, "governance/propagate_deletion", config.request_id, CODE_VERSION, config)
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


@gate_job("governance", name="propagate_deletion")
def propagate_deletion_job():
    """Carry out a deletion request: delete matching rows downstream of raw, supersede affected run views,
    expire snapshots, sweep files, prove 0 rows remain. Started by the deletion_requests sensor."""
    propagate_deletion()


@running_sensor("deletion_requests", "propagate_deletion", 30)
def deletion_requests(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """Starts propagate_deletion for every pending request in governance.deletion_requests (run key = request
    id, so each request is propagated once)."""
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


# run_view_candidate: the run_view state's job, by name (governance does not import its definitions)
@running_sensor("superseded_run_views", "run_view_candidate", 60)
def superseded_run_views(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """For each published run view superseded by a deletion, builds a new candidate with the same config on the
    current inputs (rebuild_of); it is published only after a reviewer approves it."""
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


# ---- the standing rules of the active deletion policy ------------------------------------------------------


@dg.op
def enforce_deletion_rules(context: dg.OpExecutionContext, catalog: IcebergCatalogResource) -> list:
    """File a deletion request for each standing rule of the active deletion policy that reaches rows now (data
    that arrived after the version was applied); the deletion_requests sensor propagates them."""
    lakehouse = catalog.lakehouse()
    policy = policies.active(lakehouse, "deletion")
    prov = Provenance("governance/deletion_requests", policy.label, context.run_id, POLICY_CODE_VERSION, policy.sha256)
    filed = file_standing_rules(lakehouse, policy.label, policy.policy.get("rules", []), prov)
    context.log.info("%s: %d deletion requests filed: %s", policy.label, len(filed), filed)
    context.add_output_metadata({"policy_version": policy.label, "deletion_requests": dg.MetadataValue.json(filed)})
    return filed


@gate_job("governance")
def enforce_deletion_policy():
    """Enforce the standing rules of the active deletion policy on what is in the lakehouse now."""
    enforce_deletion_rules()


@running_sensor("deletion_policy", "enforce_deletion_policy", 300)
def deletion_policy(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """When a standing rule of the active deletion policy reaches rows again (a new crawl brought the data
    back), files its deletion requests (run key = version + what the rules reach, so once per finding)."""
    lakehouse = catalog.lakehouse()
    policy = policies.active(lakehouse, "deletion")
    rules = policy.policy.get("rules", [])
    waiting = [r for r in list_requests(lakehouse, status="pending") if policy_version_of(r) == policy.label]
    if not rules or waiting:
        return dg.SkipReason(f"{policy.label}: {len(rules)} standing rules, {len(waiting)} requests pending")
    found = reach(lakehouse, rules)
    if not found["total_rows"]:
        return dg.SkipReason(f"{policy.label}: its standing rules reach no row")
    key = sha256_hex(canonical_json([policy.label, found["rows"], found["doc_ids"]]))[:16]
    return dg.RunRequest(run_key=f"deletion-policy-{key}", tags={"tokenlake/policy-version": policy.label})


defs = dg.Definitions(
    jobs=[request_deletion, propagate_deletion_job, enforce_deletion_policy],
    sensors=[deletion_requests, superseded_run_views, deletion_policy],
)
