"""`tokenlake propose` and `tokenlake proposals`: policy changes as proposals, from a terminal or an agent.

tokenlake propose threshold NAME VALUE --by WHO [--input FILE] [--tool-outputs FILE] [--reason TEXT]
tokenlake propose mixture FILE --by WHO [...]        FILE: {"components": [{name, weight, filters, ...}]}
tokenlake propose deletion FILE --by WHO [...]       FILE: {"rules": [{key_type, value, reason}]}
tokenlake proposals list [--status S]
tokenlake proposals show ID                          diff, dry-run, 10 sample documents each way, the sha256
tokenlake proposals approve ID --sha256 H --reviewer R [--comment TEXT]
tokenlake proposals reject ID --reviewer R --reason TEXT [--sha256 H]
tokenlake proposals apply ID                         activate, re-materialise what it affects, verify
tokenlake proposals rollback ID --by WHO [--reason TEXT]   a proposal restoring the parent version
tokenlake proposals verify ID                        actual flips against the dry-run

Every command runs the same Dagster jobs as the UI (propose_policy, review_proposal, apply_proposal, curate,
exact_dedup, run_view_candidate, propagate_deletion, verify_proposal) in-process on the local instance, so each
step is in the UI's run history. An agent proposes as `--by agent:<name>`; it can never approve.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial
from pathlib import Path

from iceberg_catalog import Lakehouse
from iceberg_catalog.schemas import CURATED_DOCUMENTS
from orchestration.instance import run_local_job


def _read(path: str | None) -> str:
    return Path(path).read_text() if path else ""


def _propose(kind: str, args, **fields) -> int:
    config = {
        "kind": kind,
        "proposed_by": args.by,
        "proposer_input": _read(args.input),
        "tool_outputs": _read(args.tool_outputs),
        "reason": args.reason,
        **fields,
    }
    return _record_proposal(config, "tokenlake propose", "propose", args.verbose)


def _record_proposal(config: dict, source: str, what: str, verbose: bool) -> int:
    """Run propose_policy with `config`, then show the recorded proposal briefly (or why it was refused)."""
    ok, out = run_local_job("propose_policy", "record_proposal", config, source, verbose=verbose)
    if not ok:
        print(f"{what} refused: {out}", file=sys.stderr)
        return 1
    print_proposal(out, brief=True)
    return 0


def cmd_propose_threshold(args) -> int:
    return _propose("thresholds", args, name=args.name, value=args.value)


def cmd_propose_policy(args) -> int:
    return _propose(args.kind, args, policy_json=Path(args.file).read_text())


def cmd_list(args) -> int:
    from assets.governance.proposals import list_proposals

    rows = list_proposals(Lakehouse(), args.status)
    print(f"{'proposal_id':<22} {'kind':<10} {'base':>4} {'status':<12} {'by':<20} {'reviewer':<14} created")
    for r in rows:
        print(
            f"{r['proposal_id']:<22} {r['kind']:<10} {r['base_version']:>4} {r['status']:<12} "
            f"{r['proposed_by']:<20} {r['reviewer'] or '-':<14} {r['created_at'].isoformat(timespec='seconds')}"
        )
    if not rows:
        print("(none: tokenlake propose threshold NAME VALUE --by WHO)")
    return 0


def print_proposal(proposal_id: str, brief: bool = False) -> int:
    """A proposal as a reviewer reads it: what changes, what it would do, the hash to approve."""
    from assets.governance import proposals

    lakehouse = Lakehouse()
    row = proposals.load(lakehouse, proposal_id)
    if row is None:
        print(f"unknown proposal {proposal_id!r}; see `tokenlake proposals list`", file=sys.stderr)
        return 2
    report = json.loads(row["dry_run_json"])
    print(f"proposal {row['proposal_id']}  ({row['kind']}, base version {row['base_version']}, {row['status']})")
    print(f"  proposed by {row['proposed_by']}: {row['reason'] or '-'}")
    if row["rollback_of"]:
        print(f"  rolls back {row['rollback_of']}")
    for d in json.loads(row["diff_json"]):
        print(f"  {d['path']}: {json.dumps(d['old'])} -> {json.dumps(d['new'])}")
    if row["kind"] == "thresholds":
        print(
            f"  dry-run at {CURATED_DOCUMENTS} snapshot {report['pinned'][CURATED_DOCUMENTS.identifier]}: "
            f"{report['n_to_kept']} documents would become kept, {report['n_to_dropped']} dropped; "
            f"{len(report['changed'])} decisions change in {len(report['partitions'])} partitions"
        )
    print(f"  sha256 {row['proposal_sha256']}")
    if brief:
        print(
            f"  review: tokenlake proposals show {row['proposal_id']}; approve with --sha256 {row['proposal_sha256']}"
        )
        return 0
    print("\ndry-run\n" + json.dumps({k: v for k, v in report.items() if k not in ("changed",)}, indent=2))
    if row["kind"] == "thresholds":
        for direction in ("to_kept", "to_dropped"):
            print(f"\nsamples {direction.replace('_', ' ')}")
            for s in proposals.samples(lakehouse, report["flips"][direction]):
                print(f"  {s['doc_id']}  {s['url']}\n      {s['snippet']}")
    if row["proposer_input"] or row["tool_outputs"]:
        print(f"\nproposer input ({len(row['proposer_input'] or '')} chars, verbatim):\n{row['proposer_input'] or ''}")
        print(f"\ntool outputs ({len(row['tool_outputs'] or '')} chars, verbatim):\n{row['tool_outputs'] or ''}")
    print(f"\nreviewer {row['reviewer'] or '-'}; comment {row['decision_comment'] or '-'}")
    if row["applied_json"]:
        print("applied " + json.dumps(json.loads(row["applied_json"]), indent=2))
    return 0


def cmd_show(args) -> int:
    return print_proposal(args.proposal_id)


def cmd_decide(args) -> int:
    from assets.governance.proposals import load

    sha = args.sha256
    if sha is None:  # rejecting changes nothing: the hash of the proposal as stored is enough
        row = load(Lakehouse(), args.proposal_id)
        sha = row["proposal_sha256"] if row else ""
    config = {
        "proposal_id": args.proposal_id,
        "proposal_sha256": sha,
        "reviewer": args.reviewer,
        "decision": args.decision,
        "comment": args.comment,
    }
    ok, out = run_local_job("review_proposal", "decide_proposal", config, "tokenlake proposals", verbose=args.verbose)
    if not ok:
        print(f"review_proposal refused: {out}", file=sys.stderr)
        return 1
    print(f"proposal {args.proposal_id}: {out} by {args.reviewer}")
    return 0


def apply_and_verify(proposal_id: str, verbose: bool = False) -> tuple[bool, object]:
    """apply_proposal, then curate for each affected partition and exact_dedup, then verify_proposal."""
    job = partial(run_local_job, source="tokenlake proposals apply", verbose=verbose)
    ok, parts = job("apply_proposal", "apply_policy", {"proposal_id": proposal_id})
    if not ok:
        return False, parts
    ok, out = _materialise_policy(proposal_id, job)
    if not ok:
        return False, out
    for part in parts:
        print(f"  re-materialising curated/documents {part}", flush=True)
        ok, out = job("curate", None, None, partition_key=part)
        if not ok:
            return False, f"curate {part}: {out}"
    if parts:
        ok, out = job("exact_dedup", None, None)
        if not ok:
            return False, f"exact_dedup: {out}"
    return job("verify_proposal", "verify_policy", {"proposal_id": proposal_id})


def _materialise_policy(proposal_id: str, job) -> tuple[bool, object]:
    """A mixture version: build run_view/candidate under it; a deletion version: propagate the deletion
    requests its standing rules filed (the same jobs the sensors launch), each through `job`."""
    from assets.governance import proposals

    row = proposals.load(Lakehouse(), proposal_id)
    if row["kind"] == "mixture":
        print("  building run_view/candidate under the new mixture version", flush=True)
        return job("run_view_candidate", None, None)
    for rid in proposals.deletion_requests(row):
        print(f"  propagating deletion request {rid}", flush=True)
        ok, out = job("propagate_deletion", "propagate", {"request_id": rid})
        if not ok:
            return False, f"propagate {rid}: {out}"
    return True, None


def cmd_apply(args) -> int:
    ok, out = apply_and_verify(args.proposal_id, args.verbose)
    if not ok:
        print(f"apply refused or failed: {out}", file=sys.stderr)
        return 1
    if "actual_flips" not in out:
        shown = {k: v for k, v in out.items() if k not in ("policy_version", "partitions")}
        print(f"proposal {args.proposal_id} applied: {out['policy_version']} active; {json.dumps(shown)}")
        return 0
    predicted, actual = out["predicted_flips"], out["actual_flips"]
    print(
        f"proposal {args.proposal_id} applied: {out['policy_version']} active; partitions {out['partitions']}\n"
        f"  predicted flips: {len(predicted['to_kept'])} to kept, {len(predicted['to_dropped'])} to dropped\n"
        f"  actual flips:    {len(actual['to_kept'])} to kept, {len(actual['to_dropped'])} to dropped\n"
        f"  equal (doc ids): {out['flips_equal_prediction']}; "
        f"decisions equal: {out['decision_changes_equal_prediction']}"
    )
    return 0


def cmd_verify(args) -> int:
    config = {"proposal_id": args.proposal_id}
    ok, out = run_local_job("verify_proposal", "verify_policy", config, "tokenlake proposals", verbose=args.verbose)
    if not ok:
        print(f"verify failed: {out}", file=sys.stderr)
        return 1
    print(json.dumps(out, indent=2))
    return 0


def cmd_rollback(args) -> int:
    config = {"kind": "rollback", "rollback_of": args.proposal_id, "proposed_by": args.by, "reason": args.reason}
    return _record_proposal(config, "tokenlake proposals rollback", "rollback", args.verbose)


def _proposer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--by", required=True, help="who proposes: a person, or agent:<name>")
    p.add_argument("--input", help="a file with the input the proposer was given (stored verbatim)")
    p.add_argument("--tool-outputs", help="a file with the proposer's tool outputs (stored verbatim)")
    p.add_argument("--reason", default="", help="why")


def register(sub) -> None:
    """Add `propose` and `proposals` to the tokenlake parser's subcommands."""
    propose = sub.add_parser("propose", help="propose a policy change (thresholds, mixture, deletion policy)")
    kinds = propose.add_subparsers(dest="kind", required=True)
    th = kinds.add_parser("threshold", help="change one curation threshold")
    th.add_argument("name", help="e.g. quality.gopher_min_words or language_threshold")
    th.add_argument("value", help="JSON: 30, 0.7, null (disables the rule), true")
    _proposer_args(th)
    th.set_defaults(fn=cmd_propose_threshold)
    for kind in ("mixture", "deletion"):
        p = kinds.add_parser(kind, help=f"replace the {kind} policy with the JSON in FILE")
        p.add_argument("file")
        _proposer_args(p)
        p.set_defaults(fn=cmd_propose_policy, kind=kind)
    pr = sub.add_parser("proposals", help="list, show, approve, reject, apply, roll back proposals")
    act = pr.add_subparsers(dest="action", required=True)
    ls = act.add_parser("list", help="every proposal")
    ls.add_argument("--status", default=None)
    ls.set_defaults(fn=cmd_list)
    for name, fn in (("show", cmd_show), ("apply", cmd_apply), ("verify", cmd_verify)):
        p = act.add_parser(name)
        p.add_argument("proposal_id")
        p.set_defaults(fn=fn)
    ap = act.add_parser("approve", help="approve (launches review_proposal, the same gate as the UI)")
    ap.add_argument("proposal_id")
    ap.add_argument("--sha256", required=True, help="the proposal_sha256 you reviewed")
    ap.add_argument("--reviewer", required=True)
    ap.add_argument("--comment", default="")
    ap.set_defaults(fn=cmd_decide, decision="approve")
    rj = act.add_parser("reject", help="reject (launches review_proposal)")
    rj.add_argument("proposal_id")
    rj.add_argument("--reviewer", required=True)
    rj.add_argument("--reason", required=True, dest="comment")
    rj.add_argument("--sha256", default=None)
    rj.set_defaults(fn=cmd_decide, decision="reject")
    rb = act.add_parser("rollback", help="propose restoring the version an applied proposal replaced")
    rb.add_argument("proposal_id")
    rb.add_argument("--by", required=True)
    rb.add_argument("--reason", default="")
    rb.set_defaults(fn=cmd_rollback)
