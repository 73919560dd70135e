"""The mixture and deletion policies govern through real Dagster jobs on a real lakehouse (tests/run_view/builders):
run_view/candidate builds with the active mixture version and names it (manifest and snapshots), an applied
mixture proposal is built and verified against its dry-run, its rollback finds the earlier view again (same id and
samples digest); a deletion policy's standing rules become deletion requests propagated by the deletion path, its
snapshots name the version, and what it deleted equals its dry-run, table by table."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from assets.governance import policies, proposals
from assets.governance.requests import load_request
from iceberg_catalog import Provenance
from iceberg_catalog.schemas import CURATED_DOCUMENTS, RUN_VIEW_MANIFESTS, RUN_VIEW_SAMPLES, TOKENIZED_DOCUMENTS
from tests.governance.test_proposals import _defs, apply, decide, refusal, run
from tests.run_view import builders
from tests.run_view.test_gate import candidate_metadata, materialize_candidate


@pytest.fixture
def lakehouse(lakehouse, tokenlake_home):
    """An empty lakehouse with alice and bob on the reviewer list."""
    tokenlake_home.mkdir(parents=True, exist_ok=True)
    (tokenlake_home / "governance.yaml").write_text("reviewers: [alice, bob]\n")
    return lakehouse


MIXTURE = {"components": [{"name": "all", "weight": 1.0, "max_repetitions": 2}]}


def stamp(lakehouse, t) -> str:
    snap = lakehouse.table(t).current_snapshot()
    return Provenance.from_snapshot_summary(snap.summary.additional_properties).get("policy-version", "")


def propose_policy(instance, lakehouse, kind: str, policy: dict, by="carol") -> dict:
    res = run(
        instance,
        "propose_policy",
        "record_proposal",
        {"kind": kind, "policy_json": json.dumps(policy), "proposed_by": by},
    )
    assert res.success, refusal(res)
    return proposals.load(lakehouse, res.output_for_node("record_proposal"))


def propose_rollback(instance, lakehouse, proposal_id: str) -> dict:
    res = run(
        instance,
        "propose_policy",
        "record_proposal",
        {"kind": "rollback", "rollback_of": proposal_id, "proposed_by": "carol"},
    )
    assert res.success, refusal(res)
    return proposals.load(lakehouse, res.output_for_node("record_proposal"))


def verify(instance, proposal_id: str) -> dict:
    res = run(instance, "verify_proposal", "verify_policy", {"proposal_id": proposal_id})
    assert res.success, refusal(res)
    return res.output_for_node("verify_policy")


def test_the_candidate_is_built_under_the_active_mixture_version_and_rolled_back_to_the_same_view(lakehouse, instance):
    builders.write_documents(lakehouse, n_docs=8, first=300)
    builders.screen(lakehouse)
    before = candidate_metadata(materialize_candidate(instance))
    assert before["policy_version"] == "mixture/0" and stamp(lakehouse, RUN_VIEW_SAMPLES) == "mixture/0"
    assert stamp(lakehouse, RUN_VIEW_MANIFESTS) == "mixture/0"

    row = propose_policy(instance, lakehouse, "mixture", MIXTURE)
    assert decide(instance, row).success and apply(instance, row["proposal_id"]).success
    sensor = _defs().resolve_sensor_def("applied_mixture_proposals")
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        assert [r.run_key for r in sensor(ctx)] == [f"{row['proposal_id']}:run_view"]
    after = candidate_metadata(materialize_candidate(instance))
    assert after["policy_version"] == "mixture/1" and after["run_view_id"] != before["run_view_id"]
    assert stamp(lakehouse, RUN_VIEW_SAMPLES) == "mixture/1"
    predicted = json.loads(row["dry_run_json"])["new"]
    assert after["dagster/row_count"] == predicted["n_samples"] > before["dagster/row_count"]  # two passes
    out = verify(instance, row["proposal_id"])
    assert out["run_view_id"] == after["run_view_id"] and out["realised_equal_prediction"] is True

    # an ad-hoc mixture from the Launchpad wins and says so
    adhoc = [{"name": "x", "weight": 1.0, "filters": {}, "max_repetitions": 1}]
    md = candidate_metadata(materialize_candidate(instance, name="adhoc", components=adhoc))
    assert md["policy_version"] == "mixture/adhoc" and stamp(lakehouse, RUN_VIEW_SAMPLES) == "mixture/adhoc"

    back = propose_rollback(instance, lakehouse, row["proposal_id"])
    assert decide(instance, back).success and apply(instance, back["proposal_id"]).success
    again = candidate_metadata(materialize_candidate(instance))
    assert (again["run_view_id"], again["newly_created"]) == (before["run_view_id"], False)  # the earlier view
    assert verify(instance, back["proposal_id"])["run_view_id"] == before["run_view_id"]
    assert policies.active(lakehouse, "mixture").version == 0


def test_a_deletion_policy_deletes_what_its_dry_run_predicted_through_the_deletion_path(lakehouse, instance):
    docs = builders.write_documents(lakehouse, n_docs=12, first=200)
    builders.screen(lakehouse)
    md = candidate_metadata(materialize_candidate(instance))
    rules = {
        "rules": [
            {"key_type": "doc_id", "value": docs[0]["doc_id"], "reason": "opt-out"},
            {"key_type": "url", "value": docs[1]["url"], "reason": "takedown"},
            {"key_type": "doc_id", "value": docs[1]["doc_id"], "reason": "the same document again"},
            {"key_type": "domain", "value": "nowhere.example", "reason": "reaches nothing"},
        ]
    }
    row = propose_policy(instance, lakehouse, "deletion", rules)
    report = json.loads(row["dry_run_json"])
    assert report["doc_ids"] == sorted([docs[0]["doc_id"], docs[1]["doc_id"]])
    assert report["rows"][CURATED_DOCUMENTS.identifier] == 2 == report["rows"][TOKENIZED_DOCUMENTS.identifier]
    assert (
        report["rows"][RUN_VIEW_SAMPLES.identifier] >= 2
        and report["rules"][3]["rows"][CURATED_DOCUMENTS.identifier] == 0
    )
    assert lakehouse.scan(CURATED_DOCUMENTS).num_rows == 12  # nothing deleted by proposing

    assert decide(instance, row).success and apply(instance, row["proposal_id"]).success
    applied = proposals.load(lakehouse, row["proposal_id"])
    requests = proposals.deletion_requests(applied)
    assert len(requests) == 3  # the rule that reaches nothing files nothing
    assert all(load_request(lakehouse, r)["requested_by"] == "policy:deletion/1" for r in requests)
    assert verify(instance, row["proposal_id"])["verified"] is False  # not propagated yet
    sensor = _defs().resolve_sensor_def("deletion_requests")
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        pending = list(sensor(ctx))
    assert sorted(r.run_key for r in pending) == sorted(requests)
    for req in pending:  # as the daemon launches them: the existing propagation path
        res = (
            _defs()
            .resolve_job_def("propagate_deletion")
            .execute_in_process(instance=instance, run_config=req.run_config)
        )
        assert res.success
    out = verify(instance, row["proposal_id"])
    assert out["rows_equal_prediction"] is True and out["erased"] is True
    assert out["actual_rows"] == report["rows"]
    remaining = set(lakehouse.scan(CURATED_DOCUMENTS, ("doc_id",))["doc_id"].to_pylist())
    assert not remaining & set(report["doc_ids"]) and len(remaining) == 12 - 2
    # the snapshots the deletion wrote name the deletion version; the view it superseded is rebuilt under it
    for t in (CURATED_DOCUMENTS, TOKENIZED_DOCUMENTS, RUN_VIEW_SAMPLES):
        assert stamp(lakehouse, t) == "deletion/1", t.identifier
    rebuilt = materialize_candidate(instance, rebuild_of=md["run_view_id"])
    assert candidate_metadata(rebuilt)["policy_version"] == "mixture/0"
    assert stamp(lakehouse, RUN_VIEW_SAMPLES) == "deletion/1,mixture/0"  # the inputs it read were shaped by both

    # a standing rule: the document comes back with a later write; the deletion_policy sensor files it again
    builders.write_documents(lakehouse, n_docs=12, first=200)
    sensor = _defs().resolve_sensor_def("deletion_policy")
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        req = sensor(ctx)
    assert isinstance(req, dg.RunRequest) and req.tags["tokenlake/policy-version"] == "deletion/1"
    res = _defs().resolve_job_def("enforce_deletion_policy").execute_in_process(instance=instance)
    filed = res.output_for_node("enforce_deletion_rules")
    assert len(filed) == 3 and all(load_request(lakehouse, r)["status"] == "pending" for r in filed)
    for rid in filed:
        config = {"ops": {"propagate": {"config": {"request_id": rid}}}}
        assert (
            _defs()
            .resolve_job_def("propagate_deletion")
            .execute_in_process(instance=instance, run_config=config)
            .success
        )
    remaining = set(lakehouse.scan(CURATED_DOCUMENTS, ("doc_id",))["doc_id"].to_pylist())
    assert not remaining & set(report["doc_ids"]) and len(remaining) == 12 - 2
    with dg.build_sensor_context(instance=instance, resources={"catalog": _defs().resources["catalog"]}) as ctx:
        assert isinstance(sensor(ctx), dg.SkipReason)  # nothing reached any more
