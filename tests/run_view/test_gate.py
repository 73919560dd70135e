"""The approval gate through real Dagster: the candidate asset and its blocking checks, then the
publish_run_view job with every refusal path, on a real embedded lakehouse (tests/run_view/builders.py)."""

from __future__ import annotations

import dagster as dg
import pytest
from pyiceberg.expressions import EqualTo

from assets.identity import AUTHENTICATED_USER_TAG
from assets.run_view import store
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog import schemas as T
from iceberg_catalog.run_view_contract import tag_name
from iceberg_catalog.schemas import RUN_VIEW_SAMPLES, TABLES, TOKENIZED_DOCUMENTS
from tests.run_view import builders


def _defs():
    from orchestration.definitions import defs

    return defs


def materialize_candidate(instance, **config) -> dg.ExecuteInProcessResult:
    """The run_view_candidate job (asset + its four blocking checks) with `config` as the asset's config."""
    job = _defs().resolve_job_def("run_view_candidate")
    run_config = {"ops": {"run_view__candidate": {"config": {"tokenizer": "gpt2", "seq_len": 64, **config}}}}
    return job.execute_in_process(instance=instance, run_config=run_config, raise_on_error=False)


def candidate_metadata(result: dg.ExecuteInProcessResult) -> dict:
    mat = result.asset_materializations_for_node("run_view__candidate")[0]
    return {k: v.value for k, v in mat.metadata.items()}


def decide(
    instance,
    run_view_id: str,
    sha: str,
    reviewer: str = "alice",
    decision: str = "approve",
    comment: str = "looks right",
    tags: dict | None = None,
) -> dg.ExecuteInProcessResult:
    job = _defs().resolve_job_def("publish_run_view")
    cfg = {
        "run_view_id": run_view_id,
        "manifest_sha256": sha,
        "reviewer": reviewer,
        "decision": decision,
        "comment": comment,
    }
    return job.execute_in_process(
        instance=instance, run_config={"ops": {"decide_run_view": {"config": cfg}}}, tags=tags, raise_on_error=False
    )


def refusal(result: dg.ExecuteInProcessResult) -> str:
    assert not result.success
    failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failures[0].step_failure_data.error.message


@pytest.fixture
def lakehouse(lakehouse):
    """The fresh lakehouse (conftest) with 30 documents in two screened segments."""
    builders.write_documents(lakehouse, n_docs=30)
    builders.screen(lakehouse)
    return lakehouse


def test_candidate_checks_pass_then_approve_tags_every_input(lakehouse, instance):
    res = materialize_candidate(instance, name="gate")
    assert res.success
    md = candidate_metadata(res)
    checks = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert checks == dict.fromkeys(store.CHECKS, True)
    rv_id, sha = md["run_view_id"], md["manifest_sha256"]
    assert store.load_manifest(lakehouse, rv_id)["status"] == "candidate"

    out = decide(instance, rv_id, sha, reviewer="alice")
    assert out.success
    row = store.load_manifest(lakehouse, rv_id)
    assert (row["status"], row["reviewer"], row["decision_comment"]) == ("published", "alice", "looks right")
    assert row["decided_at"] is not None and row["decided_by_run_id"] == out.run_id
    for ident, sid in row["manifest"]["inputs"].items():
        if sid is not None:
            assert lakehouse.table(TABLES[ident]).metadata.refs[tag_name(rv_id)].snapshot_id == sid
    assert tag_name(rv_id) in lakehouse.table(RUN_VIEW_SAMPLES).metadata.refs

    # published is final: approving again, or rejecting, is refused
    assert "AlreadyDecided" in refusal(decide(instance, rv_id, sha, reviewer="bob"))
    assert "AlreadyDecided" in refusal(decide(instance, rv_id, sha, reviewer="bob", decision="reject"))
    assert store.load_manifest(lakehouse, rv_id)["reviewer"] == "alice"


def test_refuses_unknown_id_stale_hash_bad_decision_and_blank_reviewer(lakehouse, instance):
    md = candidate_metadata(materialize_candidate(instance, name="gate"))
    rv_id, sha = md["run_view_id"], md["manifest_sha256"]
    assert "UnknownRunView" in refusal(decide(instance, "gate-000000000000", sha))
    stale = refusal(decide(instance, rv_id, "0" * 64))
    assert "StaleManifest" in stale and "0" * 64 in stale
    assert "decision must be" in refusal(decide(instance, rv_id, sha, decision="yes"))
    assert "reviewer is required" in refusal(decide(instance, rv_id, sha, reviewer="  "))
    assert store.load_manifest(lakehouse, rv_id)["status"] == "candidate"


def test_refuses_a_candidate_whose_checks_failed_or_never_ran(lakehouse, instance):
    # a segment that was never screened against the registered benchmark: quarantine_clean fails
    builders.write_documents(lakehouse, n_docs=6, first=40, segments=("TEST-CRAWL/unscreened",))
    res = materialize_candidate(
        instance, name="gate", components=[{"name": "new", "weight": 1.0, "filters": {"segment": ["unscreened"]}}]
    )
    assert not res.success  # a blocking check failed
    checks = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert checks["quarantine_clean"] is False and checks["non_empty"] is True
    md = candidate_metadata(res)
    msg = refusal(decide(instance, md["run_view_id"], md["manifest_sha256"]))
    assert "ChecksNotPassed" in msg and "quarantine_clean: failed" in msg

    # built outside Dagster: no check was ever evaluated for it
    direct = builders.candidate(lakehouse, name="direct")
    msg = refusal(decide(instance, direct.run_view_id, direct.manifest_sha256))
    assert "ChecksNotPassed" in msg and "not evaluated" in msg
    assert store.load_manifest(lakehouse, direct.run_view_id)["status"] == "candidate"


def test_the_reviewer_must_be_the_runs_authenticated_user_who_is_recorded(lakehouse, instance):
    md = candidate_metadata(materialize_candidate(instance, name="gate"))
    rv_id, sha = md["run_view_id"], md["manifest_sha256"]
    msg = refusal(decide(instance, rv_id, sha, reviewer="alice", tags={AUTHENTICATED_USER_TAG: "bob"}))
    assert "NotTheAuthenticatedUser: reviewer 'alice' is not 'bob'" in msg
    assert store.load_manifest(lakehouse, rv_id)["status"] == "candidate"

    out = decide(instance, rv_id, sha, reviewer="alice", tags={AUTHENTICATED_USER_TAG: "Alice"})
    assert out.success
    assert store.load_manifest(lakehouse, rv_id)["reviewer"] == "alice"  # as typed
    (event,) = [e for e in out.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert event.step_output_data.metadata["authenticated_user"].value == "Alice"
    props = lakehouse.table(T.RUN_VIEW_MANIFESTS).current_snapshot().summary.additional_properties
    recorded = Provenance.from_snapshot_summary(props)
    assert (recorded["reviewer"], recorded["authenticated-user"]) == ("alice", "Alice")


def test_reject_records_the_reason_and_is_final(lakehouse, instance):
    md = candidate_metadata(materialize_candidate(instance, name="gate", seed=3))
    out = decide(
        instance, md["run_view_id"], md["manifest_sha256"], reviewer="carol", decision="reject", comment="too much wiki"
    )
    assert out.success
    row = store.load_manifest(lakehouse, md["run_view_id"])
    assert (row["status"], row["reviewer"], row["decision_comment"]) == ("rejected", "carol", "too much wiki")
    assert tag_name(md["run_view_id"]) not in lakehouse.table(TOKENIZED_DOCUMENTS).metadata.refs
    assert "AlreadyDecided" in refusal(decide(instance, md["run_view_id"], md["manifest_sha256"]))


def test_published_rows_stay_readable_by_snapshot_after_inputs_are_rematerialised(tokenlake_home):
    rv_id = builders.published_view(n_docs=24)
    lakehouse = Lakehouse()
    row = store.load_manifest(lakehouse, rv_id)
    pinned = row["manifest"]["inputs"]["tokenized.documents"]
    before = lakehouse.scan_at(TOKENIZED_DOCUMENTS, pinned).sort_by("doc_id")
    # re-materialise every source partition with other documents: the current table no longer holds the view's
    builders.write_documents(lakehouse, n_docs=24, first=100)
    now = lakehouse.table(TOKENIZED_DOCUMENTS)
    current_ids = set(lakehouse.scan(TOKENIZED_DOCUMENTS, ("doc_id",))["doc_id"].to_pylist())
    view_ids = set(store.read_samples(lakehouse, rv_id)["doc_id"].to_pylist())
    assert not view_ids & current_ids
    by_tag = now.snapshot_by_name(tag_name(rv_id))
    assert by_tag.snapshot_id == pinned
    after = lakehouse.scan_at(TOKENIZED_DOCUMENTS, by_tag.snapshot_id).sort_by("doc_id")
    assert after.equals(before)
    verified, problems = store.check_checksums(lakehouse, rv_id, row["manifest"])
    assert (verified, problems) == (len(view_ids), [])


def test_checksums_check_names_a_corrupted_document(lakehouse, instance):
    # rewrite one segment with one document's token bytes altered but its recorded checksum kept
    rows = lakehouse.scan(TOKENIZED_DOCUMENTS, row_filter=EqualTo("segment", "seg-a")).to_pylist()
    victim = rows[2]
    victim["tokens"] = bytes([victim["tokens"][0] ^ 1]) + victim["tokens"][1:]
    builders._write(
        lakehouse,
        TOKENIZED_DOCUMENTS,
        {k: victim[k] for k in ("tokenizer_id", "crawl", "segment")},
        rows,
        row_group_rows=8,
    )
    res = materialize_candidate(instance, name="corrupt")
    checks = {e.check_name: e for e in res.get_asset_check_evaluations()}
    assert not res.success and checks["checksums_verified"].passed is False
    assert victim["doc_id"] in str(checks["checksums_verified"].metadata["details"].value)
    assert all(checks[c].passed for c in ("non_empty", "shares_within_tolerance", "quarantine_clean"))
