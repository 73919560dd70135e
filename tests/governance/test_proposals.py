"""The policy gate through real Dagster jobs (propose_policy, review_proposal, apply_proposal, verify_proposal)
on a real embedded lakehouse: the state machine, every refusal (each leaves every table as it was), rollback,
and report proposals. Re-materialisation under a new version is covered on the demo lakehouse
(test_policy_end_to_end.py, slow)."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from assets import identity
from assets.governance import policies, proposals
from iceberg_catalog import TABLES, Provenance
from iceberg_catalog import policy_store as store
from tests.governance.policy_builders import write_documents

REVIEWERS = ("alice", "bob")
PROPOSER = "agent:threshold-tuner"


def _defs():
    from orchestration.definitions import defs

    return defs


def run(instance, job: str, op: str, config: dict, tags: dict | None = None) -> dg.ExecuteInProcessResult:
    """Run `job` with `config` for `op`; `tags` as a deployment's launcher would set them."""
    return (
        _defs()
        .resolve_job_def(job)
        .execute_in_process(
            instance=instance, run_config={"ops": {op: {"config": config}}}, tags=tags, raise_on_error=False
        )
    )


def refusal(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failures[0].step_failure_data.error.message


def propose(instance, name="c4_min_sentences", value="1", by=PROPOSER, **extra) -> dict:
    config = {"kind": "thresholds", "name": name, "value": value, "proposed_by": by, **extra}
    res = run(instance, "propose_policy", "record_proposal", config)
    assert res.success, refusal(res)
    return proposals.load(_lakehouse(), res.output_for_node("record_proposal"))


def decide(instance, row: dict, reviewer="alice", decision="approve", sha=None, tags=None) -> dg.ExecuteInProcessResult:
    config = {
        "proposal_id": row["proposal_id"],
        "proposal_sha256": sha or row["proposal_sha256"],
        "reviewer": reviewer,
        "decision": decision,
        "comment": "checked the dry-run",
    }
    return run(instance, "review_proposal", "decide_proposal", config, tags)


def apply(instance, proposal_id: str) -> dg.ExecuteInProcessResult:
    return run(instance, "apply_proposal", "apply_policy", {"proposal_id": proposal_id})


def _lakehouse():
    from iceberg_catalog import Lakehouse

    return Lakehouse()


def state(lakehouse) -> dict:
    """Every table's metadata location: any commit changes it."""
    return {ident: lakehouse.table(t).metadata_location for ident, t in TABLES.items()}


@pytest.fixture
def lakehouse(lakehouse, tokenlake_home):
    """Curated documents with real signals, and alice and bob on the reviewer list."""
    write_documents(lakehouse)
    (tokenlake_home / "governance.yaml").write_text(f"reviewers: {list(REVIEWERS)}\n")
    return lakehouse


def test_an_agent_proposes_with_its_input_and_the_dry_run_shows_in_the_ui(lakehouse, instance):
    row = propose(instance, proposer_input="funnel of CRAWL-B", tool_outputs="c4_n_sentences: 30", reason="too strict")
    assert (row["status"], row["proposed_by"], row["base_version"]) == ("proposed", PROPOSER, 0)
    assert (row["proposer_input"], row["tool_outputs"], row["reason"]) == (
        "funnel of CRAWL-B",
        "c4_n_sentences: 30",
        "too strict",
    )
    assert json.loads(row["diff_json"]) == [{"path": "quality.c4_min_sentences", "old": 5, "new": 1}]
    assert row["proposal_sha256"] == proposals.frozen_sha256(row) and row["proposal_id"].startswith("prop-")
    report = json.loads(row["dry_run_json"])
    assert report["n_to_kept"] > 0 and report["pinned"]["curated.documents"] is not None
    event = instance.get_latest_materialization_event(dg.AssetKey(["governance", "proposals"]))
    md = event.asset_materialization.metadata
    assert md["proposal_id"].value == row["proposal_id"] and md["proposal_sha256"].value == row["proposal_sha256"]
    assert md["documents_to_kept"].value == report["n_to_kept"]
    assert "https://" in md["samples_to_kept"].value and "image/png" in md["flips_plot"].value
    assert policies.active(lakehouse, "thresholds").version == 0  # proposing changes nothing


def test_approve_apply_then_roll_back(lakehouse, instance):
    row = propose(instance)
    assert decide(instance, row, reviewer="alice").success
    res = apply(instance, row["proposal_id"])
    assert res.success
    assert res.output_for_node("apply_policy") == ["CRAWL-A/seg-1", "CRAWL-B/seg-1"]
    applied = proposals.load(lakehouse, row["proposal_id"])
    assert (applied["status"], applied["reviewer"], applied["new_version"]) == ("applied", "alice", 1)
    v1 = policies.active(lakehouse, "thresholds")
    assert (v1.version, v1.parent_version, v1.created_by, v1.approved_by) == (1, 0, PROPOSER, "alice")
    assert v1.policy["quality"]["c4_min_sentences"] == 1 and v1.proposal_id == row["proposal_id"]

    # without re-materialisation nothing flipped: verification says so and fails
    res = run(instance, "verify_proposal", "verify_policy", {"proposal_id": row["proposal_id"]})
    assert "differs from the dry-run (decision_changes_equal_prediction, flips_equal_prediction)" in refusal(res)

    rb = run(
        instance,
        "propose_policy",
        "record_proposal",
        {"kind": "rollback", "rollback_of": row["proposal_id"], "proposed_by": "bob"},
    )
    rollback = proposals.load(lakehouse, rb.output_for_node("record_proposal"))
    assert (rollback["rollback_of"], rollback["base_version"]) == (row["proposal_id"], 1)
    assert json.loads(rollback["new_json"]) == policies.default_policy("thresholds")
    assert decide(instance, rollback, reviewer="alice").success
    assert apply(instance, rollback["proposal_id"]).success
    assert policies.active(lakehouse, "thresholds").version == 0
    assert {p.version: p.status for p in store.versions(lakehouse, "thresholds")} == {0: "active", 1: "rolled_back"}
    assert proposals.load(lakehouse, row["proposal_id"])["status"] == "rolled_back"
    assert proposals.load(lakehouse, row["proposal_id"])["rolled_back_by"] == rollback["proposal_id"]


# ---- refusals: each with its error, each leaving every table as it was -------------------------------------


def _refused(lakehouse, result, expected: str, match: str) -> None:
    message = refusal(result)
    assert f"Failure: {expected}: " in message, message
    assert match in message, message


def test_a_stale_sha256_is_refused(lakehouse, instance):
    row = propose(instance)
    before = state(lakehouse)
    _refused(lakehouse, decide(instance, row, sha="0" * 64), "StaleProposalHash", "review the proposal as it is")
    assert state(lakehouse) == before


def test_an_unknown_id_is_refused(lakehouse, instance):
    before = state(lakehouse)
    _refused(
        lakehouse,
        decide(instance, {"proposal_id": "prop-0000", "proposal_sha256": "x"}),
        "UnknownProposal",
        "prop-0000",
    )
    _refused(lakehouse, apply(instance, "prop-0000"), "UnknownProposal", "prop-0000")
    assert state(lakehouse) == before


def test_approving_twice_is_refused(lakehouse, instance):
    row = propose(instance)
    assert decide(instance, row).success
    before = state(lakehouse)
    _refused(lakehouse, decide(instance, row, reviewer="bob"), "AlreadyDecided", "already approved (by alice)")
    _refused(lakehouse, decide(instance, row, reviewer="bob", decision="reject"), "AlreadyDecided", "final")
    assert state(lakehouse) == before


def test_applying_an_unapproved_or_rejected_proposal_is_refused(lakehouse, instance):
    row = propose(instance)
    before = state(lakehouse)
    _refused(lakehouse, apply(instance, row["proposal_id"]), "NotApproved", "is proposed")
    assert state(lakehouse) == before
    assert decide(instance, row, decision="reject").success
    before = state(lakehouse)
    _refused(lakehouse, apply(instance, row["proposal_id"]), "NotApproved", "is rejected")
    assert state(lakehouse) == before
    assert policies.active(lakehouse, "thresholds").version == 0


@pytest.mark.parametrize("proposer,reviewer", [("alice", "alice"), ("Alice", " alice "), ("ＡＬＩＣＥ", "alice")])
def test_self_approval_is_refused_whatever_the_case_width_or_spacing(lakehouse, instance, proposer, reviewer):
    row = propose(instance, by=proposer)
    assert row["proposed_by"] == proposer  # stored as typed: the audit trail
    before = state(lakehouse)
    _refused(lakehouse, decide(instance, row, reviewer=reviewer), "SelfApproval", "another reviewer must decide")
    assert state(lakehouse) == before


def test_the_reviewer_list_is_looked_up_normalised_and_the_name_stored_as_typed(lakehouse, instance):
    row = propose(instance, by="carol")
    assert decide(instance, row, reviewer="  Bob ").success
    assert proposals.load(lakehouse, row["proposal_id"])["reviewer"] == "Bob"


AUTH = identity.AUTHENTICATED_USER_TAG


@pytest.mark.parametrize("tags", [{AUTH: "bob"}, {"dagster/user": "bob"}, {AUTH: "bob", "dagster/user": "alice"}])
def test_a_reviewer_other_than_the_runs_authenticated_user_is_refused(lakehouse, instance, tags):
    row = propose(instance)
    before = state(lakehouse)
    result = decide(instance, row, reviewer="alice", tags=tags)
    _refused(lakehouse, result, "NotTheAuthenticatedUser", "reviewer 'alice' is not 'bob', the user this run was")
    assert state(lakehouse) == before


def test_the_authenticated_user_is_recorded_next_to_the_reviewer(lakehouse, instance, monkeypatch):
    monkeypatch.setenv(identity.AUTHENTICATED_USER_TAG_ENV, "sso/email")
    row = propose(instance)
    result = decide(instance, row, reviewer="alice", tags={"sso/email": " Alice ", AUTH: "mallory"})
    assert result.success
    assert proposals.load(lakehouse, row["proposal_id"])["reviewer"] == "alice"
    (out,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    recorded = out.step_output_data.metadata
    assert (recorded["reviewer"].value, recorded["authenticated_user"].value) == ("alice", "Alice")
    props = lakehouse.table(TABLES["governance.proposals"]).current_snapshot().summary.additional_properties
    assert Provenance.from_snapshot_summary(props)["authenticated-user"] == "Alice"


@pytest.mark.parametrize(
    "reviewer,expected,match",
    [
        ("agent:reviewer", "AgentCannotApprove", "never decide"),
        ("AGENT:alice", "AgentCannotApprove", "never decide"),
        ("mallory", "NotAReviewer", "not on this instance's reviewer list"),
        ("", "NotAReviewer", "not on this instance's reviewer list"),
    ],
)
def test_an_agent_or_someone_off_the_list_cannot_approve(lakehouse, instance, reviewer, expected, match):
    row = propose(instance)
    before = state(lakehouse)
    _refused(lakehouse, decide(instance, row, reviewer=reviewer), expected, match)
    assert state(lakehouse) == before


def test_replaying_an_applied_proposal_is_refused(lakehouse, instance):
    row = propose(instance)
    assert decide(instance, row).success and apply(instance, row["proposal_id"]).success
    before = state(lakehouse)
    _refused(lakehouse, apply(instance, row["proposal_id"]), "AlreadyApplied", "not repeated")
    assert state(lakehouse) == before


def test_a_proposal_whose_base_version_is_no_longer_current_is_refused(lakehouse, instance):
    first = propose(instance)
    second = propose(instance, name="language_threshold", value="0.6")
    third = propose(instance, name="gopher_min_words", value="40")
    assert decide(instance, first).success and decide(instance, third).success
    assert apply(instance, first["proposal_id"]).success  # thresholds/1 active; second and third were made on /0
    before = state(lakehouse)
    _refused(lakehouse, decide(instance, second), "StaleBaseVersion", "thresholds/1 is active now")
    _refused(lakehouse, apply(instance, third["proposal_id"]), "StaleBaseVersion", "propose the change again")
    assert state(lakehouse) == before


def test_rolling_back_a_change_that_is_not_applied_or_not_the_latest_is_refused(lakehouse, instance):
    row = propose(instance)
    config = {"kind": "rollback", "rollback_of": row["proposal_id"], "proposed_by": "bob"}
    _refused(lakehouse, run(instance, "propose_policy", "record_proposal", config), "NotApplicable", "only an applied")


def test_a_funnel_drift_report_is_filed_and_can_never_be_applied(lakehouse, instance, tokenlake_home):
    res = run(instance, "file_funnel_report", "record_funnel_report", {"margin": 0.05})
    report = proposals.load(lakehouse, res.output_for_node("record_funnel_report"))
    assert (report["kind"], report["proposed_by"]) == ("report", "agent:funnel_drift")
    assert json.loads(report["dry_run_json"])["drift"]
    assert decide(instance, report, reviewer="bob").success
    before = state(lakehouse)
    _refused(lakehouse, apply(instance, report["proposal_id"]), "NotApplicable", "never applied")
    assert state(lakehouse) == before
    # the sensor asks for a report run only when something drifted, once per distinct finding
    (tokenlake_home / "governance.yaml").write_text("reviewers: [alice]\nfunnel_drift_margin: 1.0\n")
    sensor = _defs().resolve_sensor_def("funnel_drift")
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        assert isinstance(sensor(ctx), dg.SkipReason)
    (tokenlake_home / "governance.yaml").write_text("reviewers: [alice]\nfunnel_drift_margin: 0.05\n")
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        request = sensor(ctx)
    assert request.run_key.startswith("drift-")


def test_the_applied_proposals_sensor_rematerialises_each_affected_partition_once(lakehouse, instance):
    sensor = _defs().resolve_sensor_def("applied_proposals")
    resources = {"catalog": _defs().resources["catalog"]}
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        assert isinstance(sensor(ctx), dg.SkipReason)
    row = propose(instance)
    assert decide(instance, row).success and apply(instance, row["proposal_id"]).success
    with dg.build_sensor_context(instance=instance, resources=resources) as ctx:
        requests = sensor(ctx)
    pid = row["proposal_id"]
    assert [(r.run_key, r.partition_key) for r in requests] == [
        (f"{pid}:CRAWL-A/seg-1", "CRAWL-A/seg-1"),
        (f"{pid}:CRAWL-B/seg-1", "CRAWL-B/seg-1"),
    ]
    assert all(r.tags["tokenlake/proposal"] == pid for r in requests)


def test_mixture_and_deletion_proposals_dry_run_on_the_current_lakehouse(lakehouse, instance, tmp_path):
    from tests.run_view import builders

    tokenized = builders.write_documents(lakehouse, n_docs=12, first=200)
    mixture = {"components": [{"name": "a", "weight": 1.0, "filters": {"segment": ["seg-a"]}}]}
    config = {"kind": "mixture", "policy_json": json.dumps(mixture), "proposed_by": "carol"}
    res = run(instance, "propose_policy", "record_proposal", config)
    assert res.success, refusal(res)
    report = json.loads(proposals.load(lakehouse, res.output_for_node("record_proposal"))["dry_run_json"])
    assert report["eligible_documents"] == 12
    assert report["old"]["n_tokens"] > report["new"]["n_tokens"] > 0  # only seg-a's documents
    assert [r["component"] for r in report["new"]["realised"]] == ["a"]
    event = instance.get_latest_materialization_event(dg.AssetKey(["governance", "proposals"]))
    assert "| new | a | 100.00% |" in event.asset_materialization.metadata["mixture"].value

    doc_id = tokenized[0]["doc_id"]
    rules = {"rules": [{"key_type": "doc_id", "value": doc_id, "reason": "opt-out"}]}
    config = {"kind": "deletion", "policy_json": json.dumps(rules), "proposed_by": "carol"}
    res = run(instance, "propose_policy", "record_proposal", config)
    report = json.loads(proposals.load(lakehouse, res.output_for_node("record_proposal"))["dry_run_json"])
    rows = {ident: n for ident, n in report["rules"][0]["rows"].items() if n}
    assert rows == {"curated.documents": 1, "tokenized.documents": 1} and report["doc_ids"] == [doc_id]
    assert report["rows"]["raw.warc_records"] == 0 and len(report["rows"]) == 13  # every table a deletion reaches
    assert {"dedup.embeddings", "dedup.semantic_links", "dedup.split_assignments"} <= set(report["rows"])


def test_a_mixture_policy_is_not_verified_until_a_candidate_is_built_under_it(lakehouse, instance):
    from tests.run_view import builders

    builders.write_documents(lakehouse, n_docs=8, first=300)
    mixture = {"components": [{"name": "all", "weight": 1.0, "max_repetitions": 2}]}
    config = {"kind": "mixture", "policy_json": json.dumps(mixture), "proposed_by": "carol"}
    row = proposals.load(
        lakehouse, run(instance, "propose_policy", "record_proposal", config).output_for_node("record_proposal")
    )
    assert decide(instance, row).success
    assert apply(instance, row["proposal_id"]).output_for_node("apply_policy") == []
    res = run(instance, "verify_proposal", "verify_policy", {"proposal_id": row["proposal_id"]})
    out = res.output_for_node("verify_policy")
    assert res.success and out["policy_version"] == "mixture/1" and out["verified"] is False
    assert "no run view candidate built under mixture/1" in out["note"]
    assert policies.active(lakehouse, "mixture").policy["components"][0]["max_repetitions"] == 2
    assert policies.active(lakehouse, "thresholds").version == 0
