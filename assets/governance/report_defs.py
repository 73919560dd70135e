"""Funnel reports in Dagster: when the newest crawl's funnel drifts from the previous crawl's, the
funnel_drift sensor files a `report` proposal for a reviewer; it never applies anything. See README.md.

No `from __future__ import annotations` in Dagster modules: Dagster reads config and resource types from the
runtime annotations."""

import dagster as dg
import pydantic

from assets.governance import policies, proposals
from assets.governance.proposal_defs import PROPOSALS_KEY, proposal_metadata, proposal_provenance
from assets.governance.shell import gate_job, running_sensor
from iceberg_catalog.policy_store import sha256_hex
from iceberg_catalog.run_view_contract import canonical_json
from resources import IcebergCatalogResource


class FunnelReportConfig(dg.Config):
    """Where funnel drift is reported from."""

    margin: float = pydantic.Field(default=0.10, description="Share difference of one reason that is drift.")


@dg.op
def record_funnel_report(
    context: dg.OpExecutionContext, config: FunnelReportConfig, catalog: IcebergCatalogResource
) -> str:
    """File a `report` proposal with the funnel drift between the two newest crawls (never applied)."""
    lakehouse = catalog.lakehouse()
    findings = proposals.funnel_drift(lakehouse, config.margin)
    if not findings["drift"]:
        context.log.info("no funnel drift over %.2f", config.margin)
        return ""
    prov = proposal_provenance(context, "report", config)
    reason = f"funnel drift {findings['previous_crawl']} -> {findings['crawl']} over {config.margin:.0%}"
    row = proposals.propose_report(lakehouse, findings, "agent:funnel_drift", prov, reason)
    context.log.info("filed report %s: %s", row["proposal_id"], reason)
    context.log_event(dg.AssetMaterialization(PROPOSALS_KEY, metadata=proposal_metadata(lakehouse, row)))
    return row["proposal_id"]


@gate_job("policy")
def file_funnel_report():
    """The funnel_drift sensor's proposer: files a report proposal when a new crawl's funnel drifts."""
    record_funnel_report()


@running_sensor("funnel_drift", "file_funnel_report", 300)
def funnel_drift(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """When the newest crawl's funnel (documents per decision) differs from the previous crawl's by more than
    the configured margin for a reason, files a report proposal; it never applies anything."""
    margin = policies.funnel_drift_margin()
    findings = proposals.funnel_drift(catalog.lakehouse(), margin)
    if not findings["drift"]:
        return dg.SkipReason(f"no reason's share moved more than {margin:.2f} between the two newest crawls")
    run_key = "drift-" + sha256_hex(canonical_json(findings))[:16]  # once per distinct finding
    return dg.RunRequest(run_key=run_key, run_config={"ops": {"record_funnel_report": {"config": {"margin": margin}}}})


defs = dg.Definitions(jobs=[file_funnel_report], sensors=[funnel_drift])
