"""The whole policy workflow on the demo lakehouse, with the approval given in the Dagster UI by a headless browser.

`make demo` builds the sample pipeline in a temp TOKENLAKE_HOME; an agent proposes relaxing one curation
threshold and the dry-run predicts which documents flip; in `dagster dev`, Chromium (Playwright) first launches
review_proposal with a stale hash (refused, nothing changes) and then with the proposal's hash (approved); the
proposal is applied (the affected partitions of curated/documents re-materialised under the new version, exact
duplicates after them) and the documents that actually flipped equal the prediction, doc id by doc id; every new
snapshot names the version and provenance shows it; a rollback proposal, approved and applied, restores every
curated table's content digest. The measured numbers are printed (pytest -s).
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from assets.governance import policies, proposals
from assets.governance.provenance import provenance
from iceberg_catalog import Lakehouse, Provenance
from iceberg_catalog.digest import lakehouse_digest
from iceberg_catalog.schemas import (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
    DEDUP_NEAR_DUPLICATES,
    QUARANTINE_MATCHES,
    RUN_VIEW_SAMPLES,
    TABLES,
    TOKENIZED_DOCUMENTS,
)
from tests.conftest import skip_here_fail_in_ci
from tests.orchestration.dagster_server import dagster_server, graphql
from tests.run_view.browser import launch_from_launchpad, missing_browser
from tests.run_view.test_browser_publish import RUN, run_demo

DRY_RUN_IN_UI = """{ assetOrError(assetKey: {path: ["governance", "proposals"]}) { ... on Asset {
  assetMaterializations(limit: 10) { metadataEntries { label ... on TextMetadataEntry { text }
  ... on IntMetadataEntry { intValue } ... on MarkdownMetadataEntry { mdStr } } } } } }"""
THRESHOLD, VALUE = "quality.gopher_min_alpha_token_frac", "0.7"  # Gopher's 0.8, relaxed
PROPOSER, REVIEWER = "agent:threshold-tuner", "alice-in-the-browser"


def curated_digests(lakehouse: Lakehouse) -> dict:
    digest = lakehouse_digest(lakehouse)
    return {ident: digest[ident] for ident in TABLES if ident.startswith(f"{CURATED_DOCUMENTS.namespace}.")}


# every table whose rows derive from curation's decisions: each snapshot the pipeline writes names a version
DERIVED = (
    CURATED_DOCUMENTS,
    CURATED_EXACT_DUPLICATES,
    DEDUP_MINHASH_BANDS,
    DEDUP_MINHASH_SIGNATURES,
    DEDUP_NEAR_DUPLICATES,
    TOKENIZED_DOCUMENTS,
    QUARANTINE_MATCHES,
    RUN_VIEW_SAMPLES,
)


def versions_on_snapshots(lakehouse: Lakehouse) -> dict[str, dict[str, int]]:
    """{table: {tokenlake.policy-version: snapshots}} over the pipeline's snapshots of the derived tables."""
    out: dict[str, dict[str, int]] = {}
    for t in DERIVED:
        for snap in lakehouse.table(t).snapshots():
            props = Provenance.from_snapshot_summary(snap.summary.additional_properties)
            if "asset-key" in props:
                seen = out.setdefault(t.identifier, {})
                seen[props.get("policy-version", "")] = seen.get(props.get("policy-version", ""), 0) + 1
    return out


def launchpad_yaml(config: dict) -> str:
    lines = ["ops:", "  decide_proposal:", "    config:"]
    return "\n".join(lines + [f"      {k}: {json.dumps(v)}" for k, v in config.items()]) + "\n"


@contextmanager
def keep_screenshots(folder: Path):
    """Copy the browser's PNGs (the refused and the approved review) to $TOKENLAKE_ARTIFACTS when set (CI)."""
    try:
        yield
    finally:
        artifacts = os.environ.get("TOKENLAKE_ARTIFACTS")
        if artifacts:
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            for png in folder.glob("*.png"):
                shutil.copyfile(png, Path(artifacts) / f"review_proposal_{png.name}")


def job(name: str, op: str | None, config: dict | None):
    from orchestration.instance import run_local_job

    ok, out = run_local_job(name, op, config, "test")
    assert ok, out
    return out


@pytest.mark.slow
def test_propose_approve_in_the_browser_apply_and_roll_back(tmp_path, tokenlake_home, monkeypatch):
    skip_here_fail_in_ci(missing_browser())
    dagster_home = tmp_path / "dagster"
    run_demo(tokenlake_home, dagster_home, tmp_path / "demo.log")
    monkeypatch.setenv("DAGSTER_HOME", str(dagster_home))
    (tokenlake_home / "governance.yaml").write_text(f"reviewers: [{REVIEWER}, bob]\n")
    lakehouse = Lakehouse()
    before = curated_digests(lakehouse)
    demo_versions = {
        s.summary.additional_properties.get("tokenlake.policy-version")
        for s in lakehouse.table(CURATED_DOCUMENTS).snapshots()
    }
    assert demo_versions == {"thresholds/0"}  # the demo's curation ran under the code's defaults, and says so
    demo_stamps = versions_on_snapshots(lakehouse)
    print(f"\nversions on the demo's snapshots: {demo_stamps}")
    assert set(demo_stamps) == {t.identifier for t in DERIVED}
    for ident, seen in demo_stamps.items():  # every snapshot names a version; all derive from thresholds/0
        assert all("thresholds/0" in v.split(",") for v in seen), (ident, seen)

    pid = job(
        "propose_policy",
        "record_proposal",
        {"kind": "thresholds", "name": THRESHOLD, "value": VALUE, "proposed_by": PROPOSER, "reason": "too strict"},
    )
    row = proposals.load(lakehouse, pid)
    report = json.loads(row["dry_run_json"])
    predicted = report["flips"]
    assert report["baseline_mismatches"] == 0 and len(predicted["to_kept"]) > 0

    config = {"proposal_id": pid, "proposal_sha256": "f" * 64, "reviewer": REVIEWER, "decision": "approve"}
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    homes = {"DAGSTER_HOME": str(dagster_home), "TOKENLAKE_HOME": str(tokenlake_home)}
    with dagster_server(server_dir, "dagster dev", env_extra=homes) as port, keep_screenshots(tmp_path):
        _, stale = launch_from_launchpad(
            port, "tokenlake", "review_proposal", launchpad_yaml(config), tmp_path / "stale.png"
        )
        assert stale == "FAILURE" and proposals.load(lakehouse, pid)["status"] == "proposed"
        config |= {"proposal_sha256": row["proposal_sha256"], "comment": "dry-run reviewed in the UI"}
        run_id, status = launch_from_launchpad(
            port, "tokenlake", "review_proposal", launchpad_yaml(config), tmp_path / "approve.png"
        )
        run = graphql(port, RUN, {"id": run_id})["runOrError"]
        materialisations = graphql(port, DRY_RUN_IN_UI)["assetOrError"]["assetMaterializations"]
    # the dry-run the reviewer saw, on governance/proposals in the UI (the funnel_drift sensor may have filed a
    # report there too while the daemon ran)
    shown = [
        {m["label"]: m.get("text") or m.get("intValue") or m.get("mdStr") for m in e["metadataEntries"]}
        for e in materialisations
    ]
    shown = next(e for e in shown if e["proposal_id"] == pid)
    assert shown["proposal_id"] == pid and shown["proposal_sha256"] == row["proposal_sha256"]
    assert shown["documents_to_kept"] == len(predicted["to_kept"]) and "image/png" in shown["flips_plot"]
    assert status == "SUCCESS" and {"key": "tokenlake/gate", "value": "policy"} in run["tags"]
    approved = proposals.load(lakehouse, pid)
    assert (approved["status"], approved["reviewer"], approved["decided_by_run_id"]) == ("approved", REVIEWER, run_id)

    from orchestration.propose import apply_and_verify

    ok, applied = apply_and_verify(pid)
    assert ok, applied
    assert applied["actual_flips"] == predicted and applied["flips_equal_prediction"]
    assert applied["decision_changes_equal_prediction"]
    table = lakehouse.table(CURATED_DOCUMENTS)
    stamped = {
        s.summary.additional_properties["tokenlake.partition-key"]
        for s in table.snapshots()
        if s.summary.additional_properties.get("tokenlake.policy-version") == "thresholds/1"
    }
    assert stamped == set(report["partitions"])
    doc = provenance(lakehouse, doc_id=predicted["to_kept"][0])[0]
    assert doc["curated"]["kept"] and doc["decided_by_policy"]["policy_version"] == "thresholds/1"
    applied_stamps = versions_on_snapshots(lakehouse)
    for t in (CURATED_DOCUMENTS, CURATED_EXACT_DUPLICATES):  # re-materialised under the new version
        new = applied_stamps[t.identifier].get("thresholds/1", 0) - demo_stamps[t.identifier].get("thresholds/1", 0)
        assert new >= 1, (t.identifier, applied_stamps[t.identifier])
    after_apply = curated_digests(lakehouse)
    assert after_apply[CURATED_DOCUMENTS.identifier] != before[CURATED_DOCUMENTS.identifier]

    rb = job("propose_policy", "record_proposal", {"kind": "rollback", "rollback_of": pid, "proposed_by": "bob"})
    rollback = proposals.load(lakehouse, rb)
    decision = {
        "proposal_id": rb,
        "proposal_sha256": rollback["proposal_sha256"],
        "reviewer": REVIEWER,
        "decision": "approve",
    }
    job("review_proposal", "decide_proposal", decision)
    ok, undone = apply_and_verify(rb)
    assert ok, undone
    assert undone["actual_flips"] == {"to_kept": predicted["to_dropped"], "to_dropped": predicted["to_kept"]}
    assert policies.active(lakehouse, "thresholds").version == 0
    restored = curated_digests(lakehouse)
    assert restored == before
    doc = provenance(lakehouse, doc_id=predicted["to_kept"][0])[0]
    assert not doc["curated"]["kept"] and doc["decided_by_policy"]["policy_version"] == "thresholds/0"
    final_stamps = versions_on_snapshots(lakehouse)
    assert all(v for seen in final_stamps.values() for v in seen), final_stamps  # no snapshot without a version
    print(f"versions on every snapshot after the rollback: {final_stamps}")
    print(
        f"\npolicy end to end: {THRESHOLD} -> {VALUE}; predicted {len(predicted['to_kept'])} to kept, "
        f"{len(predicted['to_dropped'])} to dropped; actual {len(applied['actual_flips']['to_kept'])} to kept, "
        f"{len(applied['actual_flips']['to_dropped'])} to dropped; equal doc ids {applied['flips_equal_prediction']}; "
        f"rollback restores every curated digest: {restored == before}"
    )
