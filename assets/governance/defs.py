"""Governance: record a deletion request, propagate it through the asset graph, rebuild the run views it
superseded. See README.md.

No `from __future__ import annotations` in defs modules: Dagster reads config and resource types from the
runtime annotations."""

import json

import dagster as dg
import pydantic

from assets.governance import policies, proposals
from assets.governance import propagate as prop
from assets.governance.requests import (
    KEY_TYPES,
    DeletionRequest,
    file_standing_rules,
    list_requests,
    policy_version_of,
    reach,
    record,
)
from assets.plots import paired_bars_markdown
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


deletion_defs = dg.Definitions(
    jobs=[request_deletion, propagate_deletion_job], sensors=[deletion_requests, superseded_run_views]
)


# ---- policy changes as proposals: propose (with dry-run), review, apply, verify, drift reports -------------

POLICY_CODE_VERSION = "policy-proposals-1"
PROPOSALS_KEY = dg.AssetKey(["governance", "proposals"])  # where dry-runs show up in the UI (asset metadata)


def _proposal_provenance(context: dg.OpExecutionContext, proposal_id: str, config: dg.Config) -> Provenance:
    return Provenance(
        "governance/proposals", proposal_id, context.run_id, POLICY_CODE_VERSION, config_hash(config.model_dump())
    )


def _refused(exc: Exception, proposal_id: str) -> dg.Failure:
    """A refusal as the step's failure: the class name says which rule refused, the message what to do."""
    return dg.Failure(
        description=f"{type(exc).__name__}: {exc}", metadata={"proposal_id": proposal_id, "refusal": type(exc).__name__}
    )


class ProposalConfig(dg.Config):
    """A policy change to propose (recorded with its dry-run; nothing changes until a reviewer approves it and
    someone applies it)."""

    kind: str = pydantic.Field(description="thresholds | mixture | deletion | rollback")
    proposed_by: str = pydantic.Field(description="Who proposes: a person, or agent:<name> for an agent.")
    name: str = pydantic.Field(default="", description="thresholds: the threshold, e.g. quality.gopher_min_words.")
    value: str = pydantic.Field(default="", description="thresholds: the new value as JSON (30, 0.7, null, true).")
    policy_json: str = pydantic.Field(default="", description="mixture | deletion: the whole new policy as JSON.")
    rollback_of: str = pydantic.Field(default="", description="rollback: the applied proposal to undo.")
    proposer_input: str = pydantic.Field(default="", description="The input the proposer was given (verbatim).")
    tool_outputs: str = pydantic.Field(default="", description="The proposer's tool outputs (verbatim).")
    reason: str = pydantic.Field(default="", description="Why.")


def propose_from_config(lakehouse, config: ProposalConfig, prov: Provenance) -> dict:
    """The proposal a ProposalConfig describes, recorded (ValueError for an unusable one)."""
    extra = {"proposer_input": config.proposer_input or None, "tool_outputs": config.tool_outputs or None}
    extra["reason"] = config.reason or None
    if config.kind == "rollback":
        return proposals.propose_rollback(lakehouse, config.rollback_of, config.proposed_by, prov, extra["reason"])
    if config.kind == "thresholds":
        value = json.loads(config.value)
        return proposals.propose_threshold(lakehouse, config.name, value, config.proposed_by, prov, **extra)
    if config.kind in ("mixture", "deletion"):
        new = json.loads(config.policy_json)
        return proposals.propose(lakehouse, config.kind, new, config.proposed_by, prov, **extra)
    raise ValueError(f"kind must be thresholds | mixture | deletion | rollback, got {config.kind!r}")


@dg.op
def record_proposal(context: dg.OpExecutionContext, config: ProposalConfig, catalog: IcebergCatalogResource) -> str:
    """Record a policy change proposal with its dry-run (shown as governance/proposals metadata)."""
    lakehouse = catalog.lakehouse()
    prov = _proposal_provenance(context, "new", config)
    try:
        row = propose_from_config(lakehouse, config, prov)
    except (proposals.ProposalRefused, ValueError, TypeError) as exc:
        raise _refused(exc, config.rollback_of) from exc
    context.log.info(
        "proposal %s (%s) by %s: sha256 %s", row["proposal_id"], row["kind"], row["proposed_by"], row["proposal_sha256"]
    )
    context.log_event(
        dg.AssetMaterialization(PROPOSALS_KEY, partition=None, metadata=proposal_metadata(lakehouse, row))
    )
    return row["proposal_id"]


def proposal_metadata(lakehouse, row: dict) -> dict:
    """What a reviewer looks at: the diff, the dry-run (tables and a plot), samples each way, the hash."""
    report = json.loads(row["dry_run_json"])
    out = {
        "proposal_id": row["proposal_id"],
        "proposal_sha256": row["proposal_sha256"],
        "kind": row["kind"],
        "base_version": row["base_version"],
        "proposed_by": row["proposed_by"],
        "reason": row["reason"] or "",
        "diff": md_table(
            ["path", "old", "new"], [[d["path"], d["old"], d["new"]] for d in json.loads(row["diff_json"])]
        ),
        "dry_run": dg.MetadataValue.json({k: v for k, v in report.items() if k not in ("changed", "flips")}),
        "to_review": dg.MetadataValue.md(
            f"Review, then launch job **review_proposal** with `proposal_id: {row['proposal_id']}`, "
            f"`proposal_sha256: {row['proposal_sha256']}`, your name as `reviewer` and `decision: approve` "
            f"(or `reject` with a comment)."
        ),
    }
    if row["kind"] == "thresholds":
        out.update(threshold_metadata(lakehouse, report))
    if row["kind"] == "mixture" and "realised" in report.get("new", {}):
        out["mixture"] = md_table(
            ["policy", "component", "requested share", "realised token share", "tokens", "documents"],
            [
                [
                    label,
                    r["component"],
                    f"{r['requested_share']:.2%}",
                    f"{r['token_share']:.2%}",
                    r["tokens"],
                    r["documents"],
                ]
                for label in ("old", "new")
                for r in report[label].get("realised", [])
            ],
        )
        out["view_size"] = md_table(
            ["policy", "samples", "tokens"],
            [[k, report[k].get("n_samples"), report[k].get("n_tokens")] for k in ("old", "new")],
        )
    return out


def threshold_metadata(lakehouse, report: dict) -> dict:
    """Flips per crawl, language and domain class, a plot per crawl, 10 samples each way."""
    out = {"documents_to_kept": report["n_to_kept"], "documents_to_dropped": report["n_to_dropped"]}
    for col, rows in report["by"].items():
        out[f"flips_by_{col}"] = md_table(
            [col, "to kept", "to dropped"], [[r["value"], r["to_kept"], r["to_dropped"]] for r in rows]
        )
    crawls = report["by"]["crawl"]
    if crawls:
        out["flips_plot"] = dg.MetadataValue.md(
            paired_bars_markdown(
                [r["value"] for r in crawls],
                [r["to_kept"] for r in crawls],
                [r["to_dropped"] for r in crawls],
                "documents flipping per crawl",
                names=("to kept", "to dropped"),
            )
        )
    for direction in ("to_kept", "to_dropped"):
        shown = proposals.samples(lakehouse, report["flips"][direction])
        out[f"samples_{direction}"] = md_table(
            ["doc_id", "url", "decision now", "snippet"],
            [[s["doc_id"], s["url"], s["decision"], s["snippet"][:100]] for s in shown],
        )
    return out


@dg.job(tags={"tokenlake/gate": "policy"}, executor_def=dg.in_process_executor)
def propose_policy():
    """Propose a policy change (thresholds, mixture, deletion policy, or the rollback of an applied change);
    the dry-run shows on governance/proposals. A person or an agent may propose; nothing changes yet."""
    record_proposal()


class ProposalDecisionConfig(dg.Config):
    """A reviewer's decision on a proposal: a decision on a proposal the reviewer did not see is refused."""

    proposal_id: str = pydantic.Field(description="The proposal's id, as shown on its dry-run.")
    proposal_sha256: str = pydantic.Field(description="The proposal hash shown on its dry-run: what you reviewed.")
    reviewer: str = pydantic.Field(description="Your name: must be on the instance's reviewer list.")
    decision: str = pydantic.Field(description="approve | reject")
    comment: str = pydantic.Field(default="", description="Why (recorded with the decision).")


@dg.op
def decide_proposal(
    context: dg.OpExecutionContext, config: ProposalDecisionConfig, catalog: IcebergCatalogResource
) -> str:
    """Approve or reject a policy proposal, bound to its sha256; refusals name the rule and change nothing."""
    prov = _proposal_provenance(context, config.proposal_id, config)
    args = (config.proposal_id, config.proposal_sha256, config.reviewer, config.decision, config.comment)
    try:
        row = proposals.decide(catalog.lakehouse(), *args, policies.reviewers(), prov)
    except (proposals.ProposalRefused, ValueError) as exc:
        raise _refused(exc, config.proposal_id) from exc
    context.log.info("proposal %s is %s (reviewer %s)", row["proposal_id"], row["status"], row["reviewer"])
    context.add_output_metadata(
        {"proposal_id": row["proposal_id"], "status": row["status"], "reviewer": row["reviewer"]}
    )
    return row["status"]


@dg.job(tags={"tokenlake/gate": "policy"}, executor_def=dg.in_process_executor)
def review_proposal():
    """The policy gate: a reviewer approves (or rejects) a proposal. Launch from the Launchpad with proposal_id,
    proposal_sha256, reviewer, decision (approve | reject), comment."""
    decide_proposal()


class ProposalIdConfig(dg.Config):
    """One proposal."""

    proposal_id: str = pydantic.Field(description="The proposal's id (`prop-` + 16 hex digits).")


@dg.op
def apply_policy(context: dg.OpExecutionContext, config: ProposalIdConfig, catalog: IcebergCatalogResource) -> list:
    """Make an approved proposal's policy version active; returns the partitions to re-materialise (the
    applied_proposals sensor, or `tokenlake proposals apply`, re-materialises them). A mixture version is then
    built by run_view/candidate (applied_mixture_proposals sensor); a deletion version's standing rules become
    pending deletion requests (deletion_requests sensor)."""
    prov = _proposal_provenance(context, config.proposal_id, config)
    try:
        row = proposals.apply(catalog.lakehouse(), config.proposal_id, prov)
    except proposals.ProposalRefused as exc:
        raise _refused(exc, config.proposal_id) from exc
    parts = proposals.affected_partitions(row)
    context.log.info(
        "proposal %s applied: %s/%d active; re-materialise %s",
        row["proposal_id"],
        row["kind"],
        row["new_version"],
        parts,
    )
    context.add_output_metadata(
        {
            "proposal_id": row["proposal_id"],
            "policy_version": f"{row['kind']}/{row['new_version']}",
            "partitions": dg.MetadataValue.json(parts),
        }
    )
    return parts


@dg.job(tags={"tokenlake/gate": "policy"}, executor_def=dg.in_process_executor)
def apply_proposal():
    """Apply an approved proposal: its policy version becomes active; the affected partitions of
    curated/documents are then re-materialised under it (applied_proposals sensor)."""
    apply_policy()


@dg.op
def verify_policy(context: dg.OpExecutionContext, config: ProposalIdConfig, catalog: IcebergCatalogResource) -> dict:
    """After re-materialisation: the documents that actually flipped against the dry-run's prediction."""
    prov = _proposal_provenance(context, config.proposal_id, config)
    try:
        row = proposals.verify(catalog.lakehouse(), config.proposal_id, prov)
    except proposals.ProposalRefused as exc:
        raise _refused(exc, config.proposal_id) from exc
    applied = json.loads(row["applied_json"])
    summary = {k: v for k, v in applied.items() if not isinstance(v, (dict, list))}
    context.add_output_metadata({"proposal_id": row["proposal_id"], "verification": dg.MetadataValue.json(summary)})
    differ = sorted(k for k, v in applied.items() if k.endswith("_equal_prediction") and v is False)
    if differ:
        raise dg.Failure(
            description=f"{row['proposal_id']}: what applying did differs from the dry-run ({', '.join(differ)})",
            metadata={"applied": dg.MetadataValue.json(applied)},
        )
    return applied


@dg.job(tags={"tokenlake/gate": "policy"}, executor_def=dg.in_process_executor)
def verify_proposal():
    """Compare what applying a proposal actually changed in curated.documents with its dry-run (doc ids)."""
    verify_policy()


@dg.sensor(
    name="applied_proposals",
    job_name="curate",  # by name: the curated state's job
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Re-materialises the curated/documents partitions an applied proposal affects (run key = proposal "
    "id + partition, so each is re-materialised once under the new version).",
)
def applied_proposals(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    todo = [
        (r["proposal_id"], part)
        for r in proposals.list_proposals(catalog.lakehouse(), status="applied")
        if not json.loads(r["applied_json"] or "{}").get("verified")
        for part in proposals.affected_partitions(r)
    ]
    if not todo:
        return dg.SkipReason("no applied proposal waiting for re-materialisation")
    return [
        dg.RunRequest(run_key=f"{pid}:{part}", partition_key=part, tags={"tokenlake/proposal": pid})
        for pid, part in todo
    ]


@dg.sensor(
    name="applied_mixture_proposals",
    job_name="run_view_candidate",  # by name: the run_view state's job
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Re-materialises run_view/candidate under a mixture policy version an applied proposal (or its "
    "rollback) made active (run key = proposal id, so once per proposal).",
)
def applied_mixture_proposals(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    todo = [
        r["proposal_id"]
        for r in proposals.list_proposals(catalog.lakehouse(), status="applied")
        if r["kind"] == "mixture" and not json.loads(r["applied_json"] or "{}").get("verified")
    ]
    if not todo:
        return dg.SkipReason("no applied mixture proposal waiting for a run view candidate")
    return [dg.RunRequest(run_key=f"{pid}:run_view", tags={"tokenlake/proposal": pid}) for pid in todo]


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


@dg.job(tags={"tokenlake/gate": "governance"}, executor_def=dg.in_process_executor)
def enforce_deletion_policy():
    """Enforce the standing rules of the active deletion policy on what is in the lakehouse now."""
    enforce_deletion_rules()


@dg.sensor(
    name="deletion_policy",
    job_name="enforce_deletion_policy",
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="When a standing rule of the active deletion policy reaches rows again (a new crawl brought the "
    "data back), files its deletion requests (run key = version + what the rules reach, so once per finding).",
)
def deletion_policy(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    lakehouse = catalog.lakehouse()
    policy = policies.active(lakehouse, "deletion")
    rules = policy.policy.get("rules", [])
    waiting = [r for r in list_requests(lakehouse, status="pending") if policy_version_of(r) == policy.label]
    if not rules or waiting:
        return dg.SkipReason(f"{policy.label}: {len(rules)} standing rules, {len(waiting)} requests pending")
    found = reach(lakehouse, rules)
    if not found["total_rows"]:
        return dg.SkipReason(f"{policy.label}: its standing rules reach no row")
    key = policies.sha256_hex(policies.canonical_json([policy.label, found["rows"], found["doc_ids"]]))[:16]
    return dg.RunRequest(run_key=f"deletion-policy-{key}", tags={"tokenlake/policy-version": policy.label})


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
    prov = _proposal_provenance(context, "report", config)
    reason = f"funnel drift {findings['previous_crawl']} -> {findings['crawl']} over {config.margin:.0%}"
    row = proposals.propose_report(lakehouse, findings, "agent:funnel_drift", prov, reason)
    context.log.info("filed report %s: %s", row["proposal_id"], reason)
    context.log_event(dg.AssetMaterialization(PROPOSALS_KEY, metadata=proposal_metadata(lakehouse, row)))
    return row["proposal_id"]


@dg.job(tags={"tokenlake/gate": "policy"}, executor_def=dg.in_process_executor)
def file_funnel_report():
    """The funnel_drift sensor's proposer: files a report proposal when a new crawl's funnel drifts."""
    record_funnel_report()


@dg.sensor(
    name="funnel_drift",
    job_name="file_funnel_report",
    minimum_interval_seconds=300,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="When the newest crawl's funnel (documents per decision) differs from the previous crawl's by more "
    "than the configured margin for a reason, files a report proposal; it never applies anything.",
)
def funnel_drift(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    margin = policies.funnel_drift_margin()
    findings = proposals.funnel_drift(catalog.lakehouse(), margin)
    if not findings["drift"]:
        return dg.SkipReason(f"no reason's share moved more than {margin:.2f} between the two newest crawls")
    run_key = "drift-" + policies.sha256_hex(policies.canonical_json(findings))[:16]  # once per distinct finding
    return dg.RunRequest(run_key=run_key, run_config={"ops": {"record_funnel_report": {"config": {"margin": margin}}}})


policy_defs = dg.Definitions(
    jobs=[
        propose_policy,
        review_proposal,
        apply_proposal,
        verify_proposal,
        file_funnel_report,
        enforce_deletion_policy,
    ],
    sensors=[applied_proposals, applied_mixture_proposals, deletion_policy, funnel_drift],
)

defs = dg.Definitions.merge(deletion_defs, policy_defs)
