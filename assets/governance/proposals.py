"""Policy changes as proposals (governance.proposals): recorded input, diff, dry-run, a hash-bound review, apply,
rollback. No Dagster.

A proposal freezes what a reviewer judges: the kind, the base version it was made against, the old and new
canonical JSON and their diff, the proposer (a person or `agent:<name>`) with the input it was given and its tool
outputs verbatim, the reason and the dry-run report; `proposal_sha256` hashes exactly that. Status moves
proposed -> approved | rejected, approved -> applied, applied -> rolled_back. A rollback is itself a proposal
(`rollback_of`) restoring the parent version, reviewed and applied like any other. A `report` proposal (the
funnel_drift sensor's) carries findings only and is never applied.

The threshold dry-run recomputes no signal: it re-derives the decision of every document from the signal
columns already stored in curated.documents at a pinned snapshot, with polars lazy frames, in the same rule
order as `quality_decision` (`decision_expr`); documents and tokens that would flip kept <-> dropped are
counted per crawl, language and domain class. Documents are named by doc_id only in the stored report.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.expressions import EqualTo, In

from assets.curated.langid import DECISION_LANGUAGE_NOT_ALLOWED, DECISION_LANGUAGE_SCORE
from assets.curated.language_rules import rules_for
from assets.curated.policy import OPTIONAL_FIELDS, quality_thresholds
from assets.curated.quality import QUALITY_SIGNAL_TYPES, QualityThresholds, quality_rules
from assets.governance import policies
from assets.governance.requests import file_standing_rules, load_request, reach
from assets.identity import identity, require_authenticated, same_person
from assets.run_view import store
from assets.run_view.mixture import Component, MixtureError, select
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.keyed_rows import get_row, put_row
from iceberg_catalog.policy_store import Policy, sha256_hex
from iceberg_catalog.run_view_contract import Manifest, canonical_json
from iceberg_catalog.schemas import CURATED_DOCUMENTS, GOVERNANCE_PROPOSALS, TOKENIZED_DOCUMENTS, TOKENIZED_TOKENIZERS

if TYPE_CHECKING:  # polars (~0.2 s) is imported where a dry run or a check runs, not by every process
    import polars as pl

REPORT = "report"
STATUSES = ("proposed", "approved", "rejected", "applied", "rolled_back")
DECISIONS = ("approve", "reject")
FROZEN = (
    "kind",
    "base_version",
    "old_json",
    "new_json",
    "diff_json",
    "proposed_by",
    "proposer_input",
    "tool_outputs",
    "reason",
    "dry_run_json",
    "rollback_of",
    "created_at",
)
DRY_RUN_COLUMNS = (
    "doc_id",
    "crawl",
    "segment",
    "host",
    "domain_class",
    "decision",
    "kept",
    "language",
    "language_score",
    "n_chars",
    *QUALITY_SIGNAL_TYPES,
)
SAMPLES_PER_DIRECTION = 10


# ---- refusals: each names what was wrong and what to do -----------------------------------------------------


class ProposalRefused(RuntimeError):
    """A decision or an apply that was refused; nothing was changed."""


class UnknownProposal(ProposalRefused):
    pass


class StaleProposalHash(ProposalRefused):
    pass


class AlreadyDecided(ProposalRefused):
    pass


class NotApproved(ProposalRefused):
    pass


class AlreadyApplied(ProposalRefused):
    pass


class SelfApproval(ProposalRefused):
    pass


class AgentCannotApprove(ProposalRefused):
    pass


class NotAReviewer(ProposalRefused):
    pass


class StaleBaseVersion(ProposalRefused):
    pass


class NotApplicable(ProposalRefused):
    pass


def is_agent(who: str) -> bool:
    """Whether `who` names an agent (`agent:<name>`, compared as `identity` compares names)."""
    return identity(who).startswith("agent:")


# ---- the frozen part ------------------------------------------------------------------------------------------


def diff(old: object, new: object, path: str = "") -> list[dict]:
    """Leaf-level differences of two JSON values: [{path, old, new}] in path order."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            out += diff(old.get(key), new.get(key), f"{path}.{key}" if path else key)
        return out
    return [] if old == new else [{"path": path, "old": old, "new": new}]


@dataclasses.dataclass(frozen=True)
class Note:
    """What comes with a proposal besides the policy, frozen with it: the input the proposer was given and its
    tool outputs (verbatim), and the reason."""

    proposer_input: str | None = None
    tool_outputs: str | None = None
    reason: str | None = None


def frozen_sha256(row: Mapping) -> str:
    """sha256 of the canonical JSON of the frozen fields: what a reviewer approves."""
    frozen = {k: row[k] for k in FROZEN}
    frozen["created_at"] = row["created_at"].isoformat()
    return sha256_hex(canonical_json(frozen))


def draft(
    kind: str,
    base: Policy | None,
    new_policy: Mapping,
    proposed_by: str,
    dry_run: Mapping,
    note: Note = Note(),
    rollback_of: str | None = None,
) -> dict:
    """A proposal row with status `proposed`, its sha256 and id (`prop-` + 16 hex of the sha256)."""
    if not proposed_by or not proposed_by.strip():
        raise ValueError("a proposal needs a proposer (--by NAME, or agent:<name> for an agent)")
    old = base.policy if base is not None else {}
    row = {
        "kind": kind,
        "base_version": base.version if base is not None else 0,
        "old_json": canonical_json(old),
        "new_json": canonical_json(new_policy),
        "diff_json": canonical_json(diff(old, dict(new_policy))),
        "proposed_by": proposed_by.strip(),
        **dataclasses.asdict(note),
        "dry_run_json": canonical_json(dry_run),
        "rollback_of": rollback_of,
        "created_at": datetime.now(UTC),
        "status": "proposed",
        **dict.fromkeys(
            ("reviewer", "decision_comment", "rolled_back_by", "new_version", "applied_json", "decided_at"), None
        ),
        **dict.fromkeys(("applied_at", "decided_by_run_id", "applied_by_run_id"), None),
    }
    row["proposal_sha256"] = frozen_sha256(row)
    row["proposal_id"] = "prop-" + row["proposal_sha256"][:16]
    return row


def load(lakehouse: Lakehouse, proposal_id: str) -> dict | None:
    """The proposal's row (None for an unknown id)."""
    return get_row(lakehouse, GOVERNANCE_PROPOSALS, proposal_id)


def require(lakehouse: Lakehouse, proposal_id: str) -> dict:
    row = load(lakehouse, proposal_id)
    if row is None:
        raise UnknownProposal(f"unknown proposal {proposal_id!r}; see `tokenlake proposals list`")
    return row


def list_proposals(lakehouse: Lakehouse, status: str | None = None) -> list[dict]:
    """Proposals, oldest first (optionally only those with `status`)."""
    rows = lakehouse.scan(GOVERNANCE_PROPOSALS, row_filter=EqualTo("status", status) if status else None)
    return sorted(rows.to_pylist(), key=lambda r: (r["created_at"], r["proposal_id"]))


def _update(lakehouse: Lakehouse, row: Mapping, provenance: Provenance, **changes) -> dict:
    out = {**row, **changes}
    put_row(lakehouse, GOVERNANCE_PROPOSALS, out, provenance)
    return out


# ---- proposing ------------------------------------------------------------------------------------------------


def set_threshold(policy: Mapping, name: str, value: object) -> dict:
    """`policy` with one threshold changed; `name` is a top-level field (language_threshold, allowed_languages,
    ppl_head_pct, ppl_tail_pct) or a quality threshold, with or without the `quality.` prefix."""
    out = json.loads(canonical_json(policy))
    field = name.removeprefix("quality.")
    if (name in out or name in OPTIONAL_FIELDS) and name != "quality":
        out[name] = value
    elif field in out["quality"] or field in {f.name for f in dataclasses.fields(QualityThresholds)}:
        out["quality"][field] = value  # also a field the stored version predates (it then reads as approved)
    else:
        known = sorted(k for k in out if k != "quality") + sorted(f"quality.{k}" for k in out["quality"])
        raise ValueError(f"unknown threshold {name!r}; thresholds: {', '.join(known)}")
    return out


def propose(
    lakehouse: Lakehouse,
    kind: str,
    new_policy: Mapping,
    proposed_by: str,
    provenance: Provenance,
    note: Note = Note(),
) -> dict:
    """Record a proposal to replace the active `kind` policy with `new_policy`, with its dry-run."""
    base = policies.active(lakehouse, kind)
    new = policies.validate_policy(kind, new_policy)
    if new == base.policy:
        raise ValueError(f"the proposed {kind} policy equals the active version {base.label}: nothing to propose")
    report = dry_run(lakehouse, kind, base.policy, new)
    row = draft(kind, base, new, proposed_by, report, note)
    put_row(lakehouse, GOVERNANCE_PROPOSALS, row, provenance)
    return row


def propose_threshold(
    lakehouse: Lakehouse, name: str, value: object, proposed_by: str, provenance: Provenance, note: Note = Note()
) -> dict:
    """Propose changing one curation threshold (the Python API behind `tokenlake propose threshold`)."""
    base = policies.active(lakehouse, "thresholds")
    return propose(lakehouse, "thresholds", set_threshold(base.policy, name, value), proposed_by, provenance, note)


def propose_rollback(
    lakehouse: Lakehouse, proposal_id: str, proposed_by: str, provenance: Provenance, reason: str | None = None
) -> dict:
    """Propose restoring the version an applied proposal replaced (its parent); dry-run included."""
    orig = require(lakehouse, proposal_id)
    if orig["status"] != "applied" or orig["rollback_of"]:
        raise NotApplicable(
            f"proposal {proposal_id} is {orig['status']}{' (itself a rollback)' if orig['rollback_of'] else ''}: "
            f"only an applied change can be rolled back"
        )
    base = policies.active(lakehouse, orig["kind"])
    if base.version != orig["new_version"]:
        raise StaleBaseVersion(
            f"{orig['kind']} is at version {base.version}, not {orig['new_version']} (the version {proposal_id} made "
            f"active): roll back the later change first"
        )
    parent = policies.version(lakehouse, orig["kind"], orig["base_version"])
    report = dry_run(lakehouse, orig["kind"], base.policy, parent.policy)
    note = Note(reason=reason or f"roll back {proposal_id}: restore {parent.label}")
    row = draft(orig["kind"], base, parent.policy, proposed_by, report, note, rollback_of=proposal_id)
    put_row(lakehouse, GOVERNANCE_PROPOSALS, row, provenance)
    return row


def propose_report(
    lakehouse: Lakehouse, findings: Mapping, proposed_by: str, provenance: Provenance, reason: str
) -> dict:
    """Record a report (findings for a reviewer, e.g. funnel drift); it can be reviewed, never applied."""
    row = draft(REPORT, None, {}, proposed_by, findings, Note(reason=reason))
    put_row(lakehouse, GOVERNANCE_PROPOSALS, row, provenance)
    return row


# ---- review ---------------------------------------------------------------------------------------------------


def decide(
    lakehouse: Lakehouse,
    proposal_id: str,
    proposal_sha256: str,
    reviewer: str,
    decision: str,
    comment: str,
    allowed_reviewers: frozenset[str],
    provenance: Provenance,
    authenticated_user: str | None = None,
) -> dict:
    """Approve or reject a proposal. Refused, with nothing written: an unknown id, a hash that is not the
    proposal's, a proposal already decided, a reviewer who is an agent, not the run's `authenticated_user`
    (where the deployment gives one), the proposer, or not on the instance's reviewer list, and (to approve) a
    base version that is no longer the active one. Names compare normalised (`assets.identity`); the reviewer
    is stored as typed."""
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, got {decision!r}")
    row = require(lakehouse, proposal_id)
    if proposal_sha256 != row["proposal_sha256"]:
        raise StaleProposalHash(
            f"proposal {proposal_id} has sha256 {row['proposal_sha256']}, not {proposal_sha256!r}: review the "
            f"proposal as it is (`tokenlake proposals show {proposal_id}`) and decide on that hash"
        )
    if row["status"] != "proposed":
        raise AlreadyDecided(
            f"proposal {proposal_id} is already {row['status']} (by {row['reviewer']}); a decision is final"
        )
    reviewer = (reviewer or "").strip()
    if is_agent(reviewer):
        raise AgentCannotApprove(f"{reviewer!r} is an agent: an agent may propose, never decide")
    require_authenticated(reviewer, authenticated_user)
    if same_person(reviewer, row["proposed_by"]):
        raise SelfApproval(
            f"{reviewer!r} is {row['proposed_by']!r}, who proposed {proposal_id} (names compare ignoring case, width "
            f"and spacing): another reviewer must decide"
        )
    if identity(reviewer) not in {identity(name) for name in allowed_reviewers}:
        raise NotAReviewer(
            f"{reviewer!r} is not on this instance's reviewer list ({policies.governance_config_path()}: "
            f"{sorted(allowed_reviewers) or 'empty'})"
        )
    if decision == "approve":
        _require_current_base(lakehouse, row)
    return _update(
        lakehouse,
        row,
        provenance,
        status="approved" if decision == "approve" else "rejected",
        reviewer=reviewer,
        decision_comment=comment,
        decided_at=datetime.now(UTC),
        decided_by_run_id=provenance.run_id,
    )


def _require_current_base(lakehouse: Lakehouse, row: Mapping) -> Policy:
    if row["kind"] == REPORT:
        return policies.builtin("thresholds")
    current = policies.active(lakehouse, row["kind"])
    if current.version != row["base_version"]:
        raise StaleBaseVersion(
            f"proposal {row['proposal_id']} was made against {row['kind']}/{row['base_version']}, but "
            f"{current.label} is active now: propose the change again against the current version"
        )
    return current


# ---- apply ----------------------------------------------------------------------------------------------------


def apply(lakehouse: Lakehouse, proposal_id: str, provenance: Provenance) -> dict:
    """Make an approved proposal's policy active (a rollback restores its parent version). Refused: unknown,
    not approved (proposed or rejected), already applied (a replay), a report, a base version no longer
    active. Returns the proposal row, status applied, with `new_version`."""
    row = require(lakehouse, proposal_id)
    if row["status"] in ("applied", "rolled_back"):
        raise AlreadyApplied(f"proposal {proposal_id} was applied already ({row['status']}); applying is not repeated")
    if row["kind"] == REPORT:
        raise NotApplicable(f"proposal {proposal_id} is a report: it informs a reviewer and is never applied")
    if row["status"] != "approved":
        raise NotApproved(
            f"proposal {proposal_id} is {row['status']}: only an approved proposal is applied (job review_proposal)"
        )
    current = policies.active(lakehouse, row["kind"])
    if current.proposal_id == proposal_id:  # the policy was written, the proposal not yet marked: finish
        return _mark_applied(lakehouse, row, current, provenance)
    _require_current_base(lakehouse, row)
    if row["rollback_of"]:
        orig = require(lakehouse, row["rollback_of"])
        policy = policies.restore(lakehouse, row["kind"], orig["base_version"], provenance)
        _update(lakehouse, orig, provenance, status="rolled_back", rolled_back_by=proposal_id)
    else:
        policy = policies.activate(
            lakehouse,
            row["kind"],
            json.loads(row["new_json"]),
            row["proposed_by"],
            row["reviewer"],
            proposal_id,
            provenance,
        )
    return _mark_applied(lakehouse, row, policy, provenance)


def _mark_applied(lakehouse: Lakehouse, row: Mapping, policy: Policy, provenance: Provenance) -> dict:
    report = json.loads(row["dry_run_json"])
    applied = {"policy_version": policy.label, "partitions": report.get("partitions", []), "verified": False}
    if row["kind"] == "deletion":  # the standing rules reach rows through deletion requests, propagated as any
        rules = policy.policy.get("rules", [])
        applied["deletion_requests"] = file_standing_rules(lakehouse, policy.label, rules, provenance)
    return _update(
        lakehouse,
        row,
        provenance,
        status="applied",
        new_version=policy.version,
        applied_at=datetime.now(UTC),
        applied_by_run_id=provenance.run_id,
        applied_json=canonical_json(applied),
    )


def affected_partitions(row: Mapping) -> list[str]:
    """The crawl/segment partitions of curated.documents whose rows the proposal changes (from its dry-run)."""
    return list(json.loads(row["dry_run_json"]).get("partitions", []))


def deletion_requests(row: Mapping) -> list[str]:
    """The deletion requests an applied deletion policy filed (its standing rules that reached rows)."""
    return list(json.loads(row["applied_json"] or "{}").get("deletion_requests", []))


def verify(lakehouse: Lakehouse, proposal_id: str, provenance: Provenance) -> dict:
    """After re-materialisation: the documents whose decision actually changed between the dry-run's pinned
    snapshot and now, against the prediction (doc ids); recorded in `applied_json`."""
    import polars as pl

    row = require(lakehouse, proposal_id)
    if row["status"] != "applied":
        raise NotApproved(f"proposal {proposal_id} is {row['status']}: only an applied proposal is verified")
    report = json.loads(row["dry_run_json"])
    if row["kind"] == "mixture":
        found = _verify_mixture(lakehouse, row, report)
    elif row["kind"] == "deletion":
        found = _verify_deletion(lakehouse, row, report)
    else:
        found = None
    if found is not None:
        out = {**json.loads(row["applied_json"] or "{}"), **found}
        return _update(lakehouse, row, provenance, applied_json=canonical_json(out))
    pinned = report["pinned"][CURATED_DOCUMENTS.identifier]
    cols = ("doc_id", "decision", "kept")
    before = pl.from_arrow(lakehouse.scan_at(CURATED_DOCUMENTS, pinned, cols)).lazy()
    current = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    after = pl.from_arrow(lakehouse.scan_at(CURATED_DOCUMENTS, current, cols)).lazy()
    joined = before.join(after, on="doc_id", how="full", suffix="_after", coalesce=True).collect()
    actual = _flips(joined, "kept", "kept_after")
    changed = joined.filter(~pl.col("decision").eq_missing(pl.col("decision_after")))
    actual_changes = sorted(changed["doc_id"].to_list())
    predicted_changes = sorted(c[0] for c in report["changed"])
    out = {
        **json.loads(row["applied_json"] or "{}"),
        "verified": True,
        "curated_snapshot_after": current,
        "actual_flips": actual,
        "predicted_flips": report["flips"],
        "flips_equal_prediction": actual == report["flips"],
        "decision_changes_equal_prediction": actual_changes == predicted_changes,
        "actual_decision_changes": len(actual_changes),
    }
    return _update(lakehouse, row, provenance, applied_json=canonical_json(out))


def _verify_mixture(lakehouse: Lakehouse, row: Mapping, report: Mapping) -> dict:
    """The newest run view candidate built under the applied mixture version against the dry-run's prediction
    (samples, tokens, realised shares); not verified until run_view/candidate was materialised under it."""
    policy = policies.version(lakehouse, "mixture", row["new_version"])
    for view in store.list_run_views(lakehouse):  # newest first
        manifest = Manifest.from_dict(store.load_manifest(lakehouse, view["run_view_id"])["manifest"])
        if manifest.policy == {"version": policy.label, "sha256": policy.sha256}:
            actual = {
                "n_samples": manifest.n_samples,
                "n_tokens": manifest.n_tokens,
                "realised": [dict(r) for r in manifest.realised],
            }
            predicted = {k: report.get("new", {}).get(k) for k in actual}
            return {
                "verified": True,
                "run_view_id": view["run_view_id"],
                "samples_sha256": manifest.samples_sha256,
                "actual": {k: actual[k] for k in ("n_samples", "n_tokens")},
                "realised_equal_prediction": actual == predicted,
            }
    return {"verified": False, "note": f"no run view candidate built under {policy.label} yet: materialise it"}


def _verify_deletion(lakehouse: Lakehouse, row: Mapping, report: Mapping) -> dict:
    """The rows the applied deletion policy's requests deleted, per table, against the dry-run's prediction;
    not verified until every request was propagated."""
    requests = [load_request(lakehouse, rid) for rid in deletion_requests(row)]
    pending = [r["request_id"] for r in requests if r["status"] != "completed"]
    if pending:
        return {"verified": False, "note": f"deletion requests not yet propagated: {pending}"}
    deleted: Counter = Counter({ident: 0 for ident in report["rows"]})
    for r in requests:
        for ident, t in json.loads(r["report_json"])["tables"].items():
            deleted[ident] += t["rows_deleted"]
    return {
        "verified": True,
        "actual_rows": dict(sorted(deleted.items())),
        "predicted_rows": report["rows"],
        "rows_equal_prediction": dict(deleted) == report["rows"],
        "erased": all(json.loads(r["report_json"])["erased"] for r in requests),
    }


def _flips(frame: pl.DataFrame, before: str, after: str) -> dict[str, list[str]]:
    import polars as pl

    to_kept = frame.filter(pl.col(after).fill_null(False) & ~pl.col(before).fill_null(False))
    to_dropped = frame.filter(pl.col(before).fill_null(False) & ~pl.col(after).fill_null(False))
    return {"to_kept": sorted(to_kept["doc_id"].to_list()), "to_dropped": sorted(to_dropped["doc_id"].to_list())}


# ---- dry-run ----------------------------------------------------------------------------------------------------


def quality_expr(t: QualityThresholds) -> pl.Expr:
    """`quality_decision`'s rules in order under thresholds `t`, over the stored signal columns; null = kept.
    A null signal never drops (the pipeline stores every signal of such a document)."""
    import polars as pl

    chain = None
    for reason, signal, drops in quality_rules(t):  # the curation's own rules: the dry-run must follow them
        drop = drops(pl.col(signal))
        chain = pl.when(drop).then(pl.lit(reason)) if chain is None else chain.when(drop).then(pl.lit(reason))
    return pl.lit(None, pl.String) if chain is None else chain.otherwise(pl.lit(None, pl.String))


def decision_expr(policy: Mapping, languages: Sequence[str | None] = ()) -> pl.Expr:
    """The decision of a document that reached the threshold rules (it has a language score), as a polars
    expression over the stored signal columns: language first, then the quality rules under the thresholds
    of the document's language (`rules_for`: per-language rules for `languages`, the policy's own for the
    rest); null = kept."""
    import polars as pl

    t = quality_thresholds(policy)
    quality = quality_expr(t)
    for lang in sorted({x for x in languages if x}):
        own = rules_for(lang, t).thresholds
        if own != t:
            quality = pl.when(pl.col("language") == lang).then(quality_expr(own)).otherwise(quality)
    chain = pl.when(pl.col("language_score") < policy["language_threshold"]).then(pl.lit(DECISION_LANGUAGE_SCORE))
    if policy["allowed_languages"] is not None:
        allowed = list(policy["allowed_languages"])
        chain = chain.when(~pl.col("language").is_in(allowed)).then(pl.lit(DECISION_LANGUAGE_NOT_ALLOWED))
    return chain.otherwise(quality)


def predicted(frame: pl.LazyFrame, policy: Mapping, name: str) -> pl.LazyFrame:
    """`frame` with column `name`: the decision under `policy` where the thresholds decide (the document has a
    language score), the stored decision elsewhere (HTTP status, extraction, empty text)."""
    import polars as pl

    governed = pl.col("language_score").is_not_null()
    languages = frame.select(pl.col("language").unique()).collect()["language"].to_list()
    decision = decision_expr(policy, languages)
    return frame.with_columns(pl.when(governed).then(decision).otherwise(pl.col("decision")).alias(name))


def dry_run(lakehouse: Lakehouse, kind: str, old: Mapping, new: Mapping) -> dict:
    """What applying `new` instead of `old` would change, without recomputing anything."""
    if kind == "thresholds":
        return dry_run_thresholds(lakehouse, old, new)
    if kind == "mixture":
        return dry_run_mixture(lakehouse, old, new)
    return dry_run_deletion(lakehouse, new)


def _batch_changes(batch: pa.RecordBatch, old: Mapping, new: Mapping) -> tuple[pl.DataFrame, dict, set[str]]:
    """One record batch: its rows whose decision changes (with the new decision), its counts, its partitions."""
    import polars as pl

    frame = predicted(predicted(pl.from_arrow(batch).lazy(), old, "decision_old"), new, "decision_new")
    frame = frame.with_columns(
        pl.col("decision_new").is_null().alias("kept_new"),
        (pl.col("crawl") + "/" + pl.col("segment")).alias("partition"),
    )
    changed = frame.filter(~pl.col("decision").eq_missing(pl.col("decision_new"))).collect()
    governed = pl.col("language_score").is_not_null()
    stats = frame.select(
        pl.len().alias("documents"),
        governed.sum().alias("governed"),
        (governed & ~pl.col("decision").eq_missing(pl.col("decision_old"))).sum().alias("baseline_mismatches"),
    ).collect()
    partitions = set(frame.select(pl.col("partition").unique()).collect()["partition"].to_list())
    return changed, stats.row(0, named=True), partitions


def dry_run_thresholds(lakehouse: Lakehouse, old: Mapping, new: Mapping) -> dict:
    """Flips kept <-> dropped under `new`, from curated.documents at its current snapshot (pinned in the report),
    streamed batch by batch (memory holds one batch and the changed rows): doc ids, counts per crawl, language
    and domain class, words and characters, tokenizer tokens of the documents that would be dropped
    (tokenized.documents at its current snapshot), and the partitions to re-materialise: those with a changed
    decision, or every partition when a perplexity percentile changes (buckets are not predicted)."""
    import polars as pl

    pinned = lakehouse.snapshot_ids([CURATED_DOCUMENTS, TOKENIZED_DOCUMENTS])
    reader = lakehouse.batches_at(CURATED_DOCUMENTS, pinned[CURATED_DOCUMENTS.identifier], DRY_RUN_COLUMNS)
    empty = pa.RecordBatch.from_pylist([], schema=reader.schema)
    parts, totals, every_partition = [], Counter(), set()
    for batch in (empty, *reader):
        changed, stats, partitions = _batch_changes(batch, old, new)
        parts.append(changed)
        totals.update(stats)
        every_partition |= partitions
    changed = pl.concat(parts)
    buckets_change = any(old[k] != new[k] for k in ("ppl_head_pct", "ppl_tail_pct"))
    flips = _flips(changed, "kept", "kept_new")
    return {
        "kind": "thresholds",
        "pinned": pinned,
        **{k: totals[k] for k in ("documents", "governed", "baseline_mismatches")},
        "flips": flips,
        "n_to_kept": len(flips["to_kept"]),
        "n_to_dropped": len(flips["to_dropped"]),
        "changed": [
            [r["doc_id"], r["decision"], r["decision_new"]] for r in changed.sort("doc_id").iter_rows(named=True)
        ],
        "partitions": sorted(every_partition if buckets_change else set(changed["partition"].to_list())),
        "ppl_buckets": "recomputed on apply, not predicted" if buckets_change else "unchanged",
        "by": {col: _flip_counts(changed, col) for col in ("crawl", "language", "domain_class")},
        "by_reason": _flip_counts(
            changed.with_columns(pl.coalesce("decision", "decision_new").alias("reason")), "reason"
        ),
        "volume": _volume(lakehouse, changed, pinned[TOKENIZED_DOCUMENTS.identifier]),
    }


def _flip_counts(changed: pl.DataFrame, column: str) -> list[dict]:
    """Per value of `column`: documents that would become kept and dropped, most first."""
    import polars as pl

    grouped = (
        changed.lazy()
        .group_by(pl.col(column).fill_null("(none)").alias("value"))
        .agg(
            (pl.col("kept_new") & ~pl.col("kept")).sum().alias("to_kept"),
            (~pl.col("kept_new") & pl.col("kept")).sum().alias("to_dropped"),
        )
        .filter((pl.col("to_kept") + pl.col("to_dropped")) > 0)
        .sort(["to_kept", "to_dropped", "value"], descending=[True, True, False])
        .collect()
    )
    return grouped.to_dicts()


def _volume(lakehouse: Lakehouse, changed: pl.DataFrame, tokenized_snapshot: int | None) -> dict:
    """Characters and words each way; tokenizer tokens of documents that would be dropped (those that become
    kept are not tokenized yet)."""
    import polars as pl

    out = {}
    for direction, mask in (
        ("to_kept", pl.col("kept_new") & ~pl.col("kept")),
        ("to_dropped", pl.col("kept") & ~pl.col("kept_new")),
    ):
        part = changed.filter(mask)
        out[direction] = {
            "documents": part.height,
            "chars": int(part["n_chars"].fill_null(0).sum()),
            "words": int(part["gopher_n_words"].fill_null(0).sum()),
        }
    dropped = changed.filter(pl.col("kept") & ~pl.col("kept_new"))["doc_id"].to_list()
    where = In("doc_id", dropped) if dropped else EqualTo("doc_id", "")
    tokens = lakehouse.scan_at(TOKENIZED_DOCUMENTS, tokenized_snapshot, ("tokenizer_id", "n_tokens"), where)
    per_tokenizer = pl.from_arrow(tokens).group_by("tokenizer_id").agg(pl.col("n_tokens").sum()).sort("tokenizer_id")
    out["to_dropped"]["tokens_by_tokenizer"] = {r["tokenizer_id"]: int(r["n_tokens"]) for r in per_tokenizer.to_dicts()}
    return out


def dry_run_mixture(lakehouse: Lakehouse, old: Mapping, new: Mapping) -> dict:
    """The realised token shares and view size of each mixture over the currently eligible documents (the same
    selection code as run_view/candidate, default tokenizer and seed)."""
    spec = store.RunViewSpec()
    pinned = lakehouse.snapshot_ids(store.INPUT_TABLES)
    out: dict = {"kind": "mixture", "pinned": pinned, "partitions": []}
    try:
        tok = store.resolve_tokenizer(lakehouse, spec.tokenizer, pinned[TOKENIZED_TOKENIZERS.identifier])
        docs, exclusions = store.eligible_documents(lakehouse, pinned, tok["tokenizer_id"])
    except ValueError as exc:
        return {**out, "error": str(exc)}
    out["eligible_documents"] = len(docs)
    for label, policy in (("old", old), ("new", new)):
        try:
            samples, realised = select(docs, [Component(**c) for c in policy["components"]], spec.seed)
        except MixtureError as exc:
            out[label] = {"error": str(exc)}
            continue
        out[label] = {
            "n_samples": len(samples),
            "n_tokens": sum(s.n_tokens for s in samples),
            "realised": [r.as_dict() for r in realised],
        }
    return out


def dry_run_deletion(lakehouse: Lakehouse, new: Mapping) -> dict:
    """The rows the standing rules of a deletion policy would reach, in every table a deletion reaches,
    resolved through the lineage keys as a request is (applying files one request per rule that reaches rows,
    propagated by the deletion path; `verify` compares what it deleted with this)."""
    return {"kind": "deletion", **reach(lakehouse, new.get("rules", [])), "partitions": []}


# ---- showing a proposal ---------------------------------------------------------------------------------------


def samples(
    lakehouse: Lakehouse, doc_ids: Sequence[str], n: int = SAMPLES_PER_DIRECTION, chars: int = 160
) -> list[dict]:
    """Up to `n` documents (doc id, URL, decision, the first `chars` characters), read from curated.documents
    when shown: the stored report holds doc ids only, so a deletion leaves nothing of the document in it."""
    ids = sorted(doc_ids)[:n]
    if not ids:
        return []
    rows = lakehouse.scan(CURATED_DOCUMENTS, ("doc_id", "url", "decision", "text"), In("doc_id", ids)).to_pylist()
    return [
        {
            "doc_id": r["doc_id"],
            "url": r["url"],
            "decision": r["decision"],
            "snippet": (r["text"] or "")[:chars].replace("\n", " "),
        }
        for r in sorted(rows, key=lambda r: r["doc_id"])
    ]


# ---- the built-in proposer: funnel drift between crawls ----------------------------------------------------


def funnel_drift(lakehouse: Lakehouse, margin: float) -> dict:
    """Documents per decision as shares of each crawl, newest crawl (latest collection time) against the one
    before: the reasons whose share moved by more than `margin`."""
    import polars as pl

    pinned = lakehouse.snapshot_id(CURATED_DOCUMENTS)
    docs = pl.from_arrow(lakehouse.scan_at(CURATED_DOCUMENTS, pinned, ("crawl", "decision", "warc_date"))).lazy()
    order = (docs.group_by("crawl").agg(pl.col("warc_date").max().alias("latest")).sort(["latest", "crawl"]).collect())[
        "crawl"
    ].to_list()
    out: dict = {"pinned": pinned, "margin": margin, "drift": [], "crawl": None, "previous_crawl": None}
    if len(order) < 2:
        return out
    prev, new = order[-2], order[-1]
    shares = (
        docs.filter(pl.col("crawl").is_in([prev, new]))
        .with_columns(pl.col("decision").fill_null("kept"))
        .group_by("crawl", "decision")
        .agg(pl.len().alias("n"))
        .with_columns((pl.col("n") / pl.col("n").sum().over("crawl")).alias("share"))
        .collect()
    )
    table = {(r["crawl"], r["decision"]): r["share"] for r in shares.iter_rows(named=True)}
    for reason in sorted({d for _, d in table}):
        a, b = table.get((prev, reason), 0.0), table.get((new, reason), 0.0)
        if abs(b - a) > margin:
            out["drift"].append({"reason": reason, "previous_share": round(a, 6), "share": round(b, 6)})
    return {**out, "crawl": new, "previous_crawl": prev}
