"""Policy changes in Dagster: propose (with its dry-run), review, apply, verify, and the sensors that
re-materialise what an applied proposal changes. See README.md.

No `from __future__ import annotations` in Dagster modules: Dagster reads config and resource types from the
runtime annotations."""

import dataclasses
import json

import dagster as dg
import pydantic

from assets.governance import policies, proposals
from assets.governance.shell import gate_job, op_provenance, refused, running_sensor
from assets.identity import authenticated_user, recorded
from assets.plots import paired_bars_markdown
from assets.shell import md_table, table_key
from iceberg_catalog import Provenance
from iceberg_catalog.schemas import GOVERNANCE_PROPOSALS
from resources import IcebergCatalogResource

POLICY_CODE_VERSION = "policy-proposals-1"
PROPOSALS_KEY = table_key(GOVERNANCE_PROPOSALS)  # where dry-runs show up in the UI (asset metadata)


def proposal_provenance(context: dg.OpExecutionContext, proposal_id: str, config: dg.Config) -> Provenance:
    """The provenance of a commit to governance.proposals or .policies made by a policy op."""
    return op_provenance(context, "governance/proposals", proposal_id, POLICY_CODE_VERSION, config)


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
    note = proposals.Note(config.proposer_input or None, config.tool_outputs or None, config.reason or None)
    if config.kind == "rollback":
        return proposals.propose_rollback(lakehouse, config.rollback_of, config.proposed_by, prov, note.reason)
    if config.kind == "thresholds":
        value = json.loads(config.value)
        return proposals.propose_threshold(lakehouse, config.name, value, config.proposed_by, prov, note)
    if config.kind in ("mixture", "deletion"):
        new = json.loads(config.policy_json)
        return proposals.propose(lakehouse, config.kind, new, config.proposed_by, prov, note)
    raise ValueError(f"kind must be thresholds | mixture | deletion | rollback, got {config.kind!r}")


@dg.op
def record_proposal(context: dg.OpExecutionContext, config: ProposalConfig, catalog: IcebergCatalogResource) -> str:
    """Record a policy change proposal with its dry-run (shown as governance/proposals metadata)."""
    lakehouse = catalog.lakehouse()
    prov = proposal_provenance(context, "new", config)
    try:
        row = propose_from_config(lakehouse, config, prov)
    except (proposals.ProposalRefused, ValueError, TypeError) as exc:
        raise refused(exc, config.rollback_of) from exc
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
        out.update(mixture_metadata(report))
    return out


def mixture_metadata(report: dict) -> dict:
    """Requested against realised token shares and the view's size, under the old and the new mixture."""
    return {
        "mixture": md_table(
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
        ),
        "view_size": md_table(
            ["policy", "samples", "tokens"],
            [[k, report[k].get("n_samples"), report[k].get("n_tokens")] for k in ("old", "new")],
        ),
    }


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


@gate_job("policy")
def propose_policy():
    """Propose a policy change (thresholds, mixture, deletion policy, or the rollback of an applied change);
    the dry-run shows on governance/proposals. A person or an agent may propose; nothing changes yet."""
    record_proposal()


class ProposalDecisionConfig(dg.Config):
    """A reviewer's decision on a proposal: a decision on a proposal the reviewer did not see is refused."""

    proposal_id: str = pydantic.Field(description="The proposal's id, as shown on its dry-run.")
    proposal_sha256: str = pydantic.Field(description="The proposal hash shown on its dry-run: what you reviewed.")
    reviewer: str = pydantic.Field(
        description="Your name: must be on the instance's reviewer list (and be the user your deployment "
        "authenticated, where it tags the run with one)."
    )
    decision: str = pydantic.Field(description=" | ".join(proposals.DECISIONS))
    comment: str = pydantic.Field(default="", description="Why (recorded with the decision).")


@dg.op
def decide_proposal(
    context: dg.OpExecutionContext, config: ProposalDecisionConfig, catalog: IcebergCatalogResource
) -> str:
    """Approve or reject a policy proposal, bound to its sha256; refusals name the rule and change nothing. The
    user the deployment authenticated for the run (a run tag, `assets.identity`) is recorded next to the reviewer."""
    who = authenticated_user(context.run.tags)
    prov = proposal_provenance(context, config.proposal_id, config)
    prov = dataclasses.replace(prov, extra={**prov.extra, **recorded(who)})
    args = (config.proposal_id, config.proposal_sha256, config.reviewer, config.decision, config.comment)
    try:
        row = proposals.decide(catalog.lakehouse(), *args, policies.reviewers(), prov, who)
    except (proposals.ProposalRefused, ValueError) as exc:
        raise refused(exc, config.proposal_id) from exc
    context.log.info("proposal %s is %s (reviewer %s)", row["proposal_id"], row["status"], row["reviewer"])
    decision = {"proposal_id": row["proposal_id"], "status": row["status"], "reviewer": row["reviewer"]}
    context.add_output_metadata({**decision, **({"authenticated_user": who} if who else {})})
    return row["status"]


@gate_job("policy")
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
    prov = proposal_provenance(context, config.proposal_id, config)
    try:
        row = proposals.apply(catalog.lakehouse(), config.proposal_id, prov)
    except proposals.ProposalRefused as exc:
        raise refused(exc, config.proposal_id) from exc
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


@gate_job("policy")
def apply_proposal():
    """Apply an approved proposal: its policy version becomes active; the affected partitions of
    curated/documents are then re-materialised under it (applied_proposals sensor)."""
    apply_policy()


@dg.op
def verify_policy(context: dg.OpExecutionContext, config: ProposalIdConfig, catalog: IcebergCatalogResource) -> dict:
    """After re-materialisation: the documents that actually flipped against the dry-run's prediction."""
    prov = proposal_provenance(context, config.proposal_id, config)
    try:
        row = proposals.verify(catalog.lakehouse(), config.proposal_id, prov)
    except proposals.ProposalRefused as exc:
        raise refused(exc, config.proposal_id) from exc
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


@gate_job("policy")
def verify_proposal():
    """Compare what applying a proposal actually changed in curated.documents with its dry-run (doc ids)."""
    verify_policy()


def unverified(lakehouse) -> list[dict]:
    """Applied proposals whose effect is not verified yet (their re-materialisation may still be due)."""
    return [
        r
        for r in proposals.list_proposals(lakehouse, status="applied")
        if not json.loads(r["applied_json"] or "{}").get("verified")
    ]


@running_sensor("applied_proposals", "curate", 30)  # by name: the curated state's job
def applied_proposals(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """Re-materialises the curated/documents partitions an applied proposal affects (run key = proposal id +
    partition, so each is re-materialised once under the new version)."""
    todo = [
        (r["proposal_id"], part) for r in unverified(catalog.lakehouse()) for part in proposals.affected_partitions(r)
    ]
    if not todo:
        return dg.SkipReason("no applied proposal waiting for re-materialisation")
    return [
        dg.RunRequest(run_key=f"{pid}:{part}", partition_key=part, tags={"tokenlake/proposal": pid})
        for pid, part in todo
    ]


@running_sensor("applied_mixture_proposals", "run_view_candidate", 30)  # by name: the run_view state's job
def applied_mixture_proposals(context: dg.SensorEvaluationContext, catalog: IcebergCatalogResource):
    """Re-materialises run_view/candidate under a mixture policy version an applied proposal (or its rollback)
    made active (run key = proposal id, so once per proposal)."""
    todo = [r["proposal_id"] for r in unverified(catalog.lakehouse()) if r["kind"] == "mixture"]
    if not todo:
        return dg.SkipReason("no applied mixture proposal waiting for a run view candidate")
    return [dg.RunRequest(run_key=f"{pid}:run_view", tags={"tokenlake/proposal": pid}) for pid in todo]


defs = dg.Definitions(
    jobs=[propose_policy, review_proposal, apply_proposal, verify_proposal],
    sensors=[applied_proposals, applied_mixture_proposals],
)
